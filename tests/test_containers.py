"""The cell containers: their definitions, and the exact apptainer calls Snakemake makes with --use-singularity.

CI has no container runtime, so `tests/standin/apptainer` (a recording stand-in that runs the inner command on the
host) is put first on PATH; the tests assert on the arguments it recorded and on what a real runtime showed a cell
needs from them (containers/README.md: the CPU image run with a real runtime).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from spython.main.parse.parsers import SingularityParser

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from tests.conftest import REPO, snakemake, tiny_config, write_config

DEF = REPO / "containers" / "loaderbench.def"
CPU_DEF = REPO / "containers" / "loaderbench-cpu.def"


def section(name: str, definition: Path = DEF) -> str:
    text = definition.read_text()
    m = re.search(rf"^%{name}\n(.*?)(?=^%|\Z)", text, re.DOTALL | re.MULTILINE)
    assert m, f"no %{name} section"
    return m.group(1)


def test_definition_pins_an_ngc_pytorch_base_and_tests_dali_on_the_cpu():
    recipe = SingularityParser(str(DEF)).recipe["spython-base"]
    assert re.fullmatch(r"nvcr\.io/nvidia/pytorch:\d{2}\.\d{2}-py3", recipe.fromHeader), recipe.fromHeader
    assert "latest" not in recipe.fromHeader
    assert recipe.test  # spython found a %test section
    test = section("test")
    for module in ("import cv2", "pynvml", "torch", "torchvision", "nvidia.dali"):
        assert module in test
    assert "device_id=None" in test and "pipe.run()" in test  # one CPU-only DALI batch
    assert any(label.startswith("org.loaderbench.base " + recipe.fromHeader) for label in recipe.labels)


@pytest.mark.slow
def test_the_definitions_test_section_runs_here():
    """%test's Python (imports and one CPU-only DALI batch) run outside the container, with this project's packages."""
    import subprocess
    import sys

    body = re.search(r"<<'PY'\n(.*?)\nPY\n", section("test"), re.DOTALL).group(1)
    out = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert "CPU-only DALI batch ok: (2, 32, 32, 3)" in out.stdout


def header(definition: Path) -> dict[str, str]:
    """The `Key: value` lines above the first section."""
    head = definition.read_text().split("\n%", 1)[0]
    return dict(re.findall(r"^(\w+):\s*(.*?)\s*$", head, re.MULTILINE))


def test_cpu_definition_bootstraps_debian_with_fuse_and_runs_the_ngc_images_test():
    """The image for machines without NGC access: Debian bookworm by debootstrap, its Python, fuse3, and the same
    %test as the NGC image (the imports and one CPU-only DALI batch)."""
    head = header(CPU_DEF)
    assert head["Bootstrap"] == "debootstrap" and head["OSVersion"] == "bookworm"
    assert re.fullmatch(r"https?://\S+/debian/?", head["MirrorURL"]), head["MirrorURL"]
    assert {"python3", "python3-pip", "fuse3"} <= set(head["Include"].split())
    heredoc = r"<<'PY'\n(.*?)\nPY\n"
    assert re.search(heredoc, section("test", CPU_DEF), re.DOTALL).group(1) == re.search(
        heredoc, section("test"), re.DOTALL
    ).group(1)
    assert "command -v fusermount3" in section("test", CPU_DEF)
    # torch and torchvision pinned like the rest: the cells' stack is named by the image
    pins = dict(re.findall(r"([A-Za-z0-9_.-]+)==([0-9][^\s\"']*)", section("post", CPU_DEF)))
    assert {"torch", "torchvision", "nvidia-dali-cuda120", "mfusepy"} <= pins.keys()


@pytest.mark.parametrize("definition", [DEF, CPU_DEF], ids=lambda p: p.name)
def test_pinned_extras_satisfy_the_projects_own_dependency_ranges(definition):
    from packaging.requirements import Requirement

    declared = {
        Requirement(r).name: Requirement(r)
        for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    pins = dict(re.findall(r"([A-Za-z0-9_.-]+)==([0-9][^\s\"']*)", section("post", definition)))
    assert pins, "no pinned installs in %post"
    for name, version in pins.items():
        if name in declared:
            assert declared[name].specifier.contains(version), f"{name}=={version} outside pyproject's {declared[name]}"
    label = next(line for line in section("labels", definition).splitlines() if "org.loaderbench.extra" in line)
    assert dict(re.findall(r"([A-Za-z0-9_.-]+)==(\S+)", label)) == pins  # the label lists exactly what %post pins


@pytest.mark.e2e
def test_use_singularity_runs_each_cell_in_the_container_with_nv_binds_and_image(tmp_path):
    extra = tmp_path / "extra-bind"
    extra.mkdir()
    cfg = tiny_config(
        tmp_path, precisions=["fp32"], container={"image": str(tmp_path / "cell.sif"), "binds": [str(extra)]}
    )
    (tmp_path / "cell.sif").write_bytes(b"stand-in image")
    cfg_path = write_config(tmp_path, cfg)
    log = tmp_path / "apptainer.jsonl"
    # The stand-in runs the inner `python3` on the host: this interpreter's folder comes first on PATH, standing in
    # for the image's Python with the project's packages.
    path = f"{REPO / 'tests' / 'standin'}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "APPTAINER_STANDIN_LOG": str(log)}
    planned = snakemake(tmp_path, "--configfile", str(cfg_path), "--use-singularity", "-n", env=env)
    assert re.search(r"^cell\s+4$", planned.stdout, re.MULTILINE)
    assert f"the 4 cell jobs run in the container {tmp_path / 'cell.sif'} (apptainer exec --nv --bind" in planned.stderr
    snakemake(tmp_path, "--configfile", str(cfg_path), "--use-singularity", env=env)

    calls = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
    execs = [c for c in calls if "exec" in c]
    resolved = validate_config(cfg)
    assert len(execs) == len(cell_ids(resolved)) == 4  # only the cell jobs run in the container
    binds = {str(Path(t["path"]).resolve()) for t in resolved["storage"].values()} | {str(extra), str(REPO)}
    for argv in execs:
        i = argv.index("exec")
        opts = argv[i + 1 :]
        assert opts[:2] == ["--home", str(tmp_path)]  # Snakemake's own: the working directory as home
        assert "--nv" in opts
        bound = {opts[k + 1] for k, a in enumerate(opts) if a == "--bind"}
        assert binds <= bound, binds - bound
        image_at = opts.index(str(tmp_path / "cell.sif"))
        assert opts[image_at + 1 : image_at + 3] == ["bash", "-c"]
        inner = opts[image_at + 3]
        # the cell calls the package through lb_cell (the shell prefix): in the container, the image's Python
        assert f'lb_cell() {{ PYTHONPATH={REPO / "src"} python3 -m loaderbench "$@" --timeout-s' in inner
        assert "lb_cell run-cell --spec" in inner
    for cid in cell_ids(resolved):
        rec = json.loads((tmp_path / "results/cells" / f"{cid}.json").read_text())
        assert rec["status"] == "ok"
        assert rec["provenance"]["container"] == {"in_container": True, "image": str(tmp_path / "cell.sif")}
        assert rec["provenance"]["git"]["commit"]  # passed in from the host, the image has no .git to read
    table = (tmp_path / "results/tables/cells.csv").read_text()
    assert table.count("\n") == 1 + 4
