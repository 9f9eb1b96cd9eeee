"""The package's shape: sub-packages by concern, each importing only those below it (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src/loaderbench"
# bottom to top: a sub-package may import only those before it
LAYERS = ["core", "data", "loaders", "models", "engine", "plan", "whatif", "report", "experiments", "cli"]


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


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def walk(node: ast.AST, type_checking: bool = True):
    """ast.walk, leaving out `if TYPE_CHECKING:` blocks when `type_checking` is false (they never run)."""
    yield node
    for child in ast.iter_child_nodes(node):
        test = child.test if isinstance(child, ast.If) else None
        if not type_checking and test is not None and ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            yield from (x for orelse in child.orelse for x in walk(orelse, type_checking))
            continue
        yield from walk(child, type_checking)


def module_imports(path: Path, type_checking: bool = True) -> tuple[set[str], dict[str, str], list[tuple]]:
    """The loaderbench modules `path` imports anywhere (a package: its __init__), the local names bound to modules,
    and each (line, module, name) it takes with `from module import name`."""
    base = module_name(path).split(".")[: None if path.name == "__init__.py" else -1]
    modules, aliases, names = set(), {}, []
    for node in walk(ast.parse(path.read_text()), type_checking):
        if isinstance(node, ast.ImportFrom):
            anchor = base[: len(base) - node.level + 1] if node.level else []
            source = ".".join([*anchor, *([node.module] if node.module else [])])
            if source not in MODULES:
                continue
            for a in node.names:
                if f"{source}.{a.name}" in MODULES:  # a sub-module, not a name of the package
                    modules.add(f"{source}.{a.name}")
                    aliases[a.asname or a.name] = f"{source}.{a.name}"
                else:
                    modules.add(source)
                    names.append((node.lineno, source, a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    modules.add(a.name)
                    if a.asname:  # without one the name bound is `loaderbench`, spelled out where used
                        aliases[a.asname] = a.name
    return modules - {module_name(path)}, aliases, names


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return head and f"{head}.{node.attr}"
    return None


def test_no_module_uses_another_modules_private_names():
    """A name with a leading underscore belongs to its module: one another module needs is made public (or moved)."""
    wrong = []
    for name, path in MODULES.items():
        _, aliases, taken = module_imports(path)
        wrong += [
            f"{name}:{line} imports {source}.{n}" for line, source, n in taken if is_private(n) and source != name
        ]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and is_private(node.attr) and (head := dotted(node.value)):
                first, _, rest = head.partition(".")
                owner = ".".join(filter(None, [aliases.get(first, first), rest]))
                if owner in MODULES and owner != name:
                    wrong.append(f"{name}:{node.lineno} uses {owner}.{node.attr}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle_between_modules():
    """Imports inside functions count: a cycle only they close still means two modules that need each other."""
    graph = {name: module_imports(path, type_checking=False)[0] for name, path in MODULES.items()}
    state: dict[str, str] = {}
    cycles = []

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for other in sorted(graph[name]):
            if state.get(other) == "open":
                cycles.append(" -> ".join(stack[stack.index(other) :] + [name, other]))
            elif other not in state:
                visit(other, [*stack, name])
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    assert not cycles, "\n".join(cycles)


def test_a_module_run_with_python_m_is_not_imported_by_its_packages():
    """`python -m loaderbench.engine.process.warmstart` runs the module as __main__; had `loaderbench.engine` imported it
    already, two copies would live in the process (runpy warns) and the server would not be the one its clients see."""
    import subprocess
    import sys

    mains = sorted(
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for p in PACKAGE.rglob("*.py")
        if 'if __name__ == "__main__"' in p.read_text() and p.name != "__main__.py"
    )
    assert "loaderbench.engine.process.warmstart" in mains
    code = (
        "import importlib, sys\nbad = []\nfor m in sys.argv[1:]:\n    importlib.import_module(m.rsplit('.', 1)[0])\n"
        "    bad += [m] if m in sys.modules else []\nprint(' '.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code, *mains], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"imported by their packages: {out}"
