"""The package's shape: sub-packages by concern, each importing only those below it (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src/loaderbench"
# bottom to top: a sub-package may import only those before it
LAYERS = ["core", "data", "loaders", "engine", "plan", "report", "experiments", "cli"]


def imports(path: Path) -> set[str]:
    """The loaderbench sub-packages `path` imports, anywhere in the file."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    base = list(parts[:-1])  # the package holding the module (for an __init__, itself)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                names = [".".join(anchor + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
            if names[0] == "loaderbench":  # from loaderbench import core
                names = [f"loaderbench.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out |= {n.split(".")[1] for n in names if n.startswith("loaderbench.")}
    return out


def test_sub_packages_import_only_those_below_them():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).parts
        if len(rel) == 1:  # the package's own __init__ and __main__
            continue
        own = rel[0]
        assert own in LAYERS, f"{path}: sub-package {own!r} is not in LAYERS"
        below = set(LAYERS[: LAYERS.index(own)])
        wrong += [f"{'/'.join(rel)} imports {other}" for other in imports(path) - below - {own}]
    assert not wrong, "\n".join(sorted(wrong))


def test_every_module_lives_in_a_sub_package():
    flat = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not flat, f"modules outside a sub-package: {flat}"


def test_a_module_run_with_python_m_is_not_imported_by_its_packages():
    """`python -m loaderbench.engine.warmstart` runs the module as __main__; had `loaderbench.engine` imported it
    already, two copies would live in the process (runpy warns) and the server would not be the one its clients see."""
    import subprocess
    import sys

    mains = sorted(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts) for p in PACKAGE.rglob("*.py")
                   if 'if __name__ == "__main__"' in p.read_text() and p.name != "__main__.py")  # fmt: skip
    assert "loaderbench.engine.warmstart" in mains
    code = ("import importlib, sys\nbad = []\nfor m in sys.argv[1:]:\n    importlib.import_module(m.rsplit('.', 1)[0])\n"
            "    bad += [m] if m in sys.modules else []\nprint(' '.join(bad))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, *mains], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"imported by their packages: {out}"
