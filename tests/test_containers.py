"""The cell containers: their definitions, and the exact apptainer calls Snakemake makes with --use-singularity.

CI has no container runtime, so `tests/standin/apptainer` (a recording stand-in that runs the inner command on the
host) is put first on PATH; the tests assert on the arguments it recorded and on what a real runtime showed a cell
needs from them (containers/README.md: the CPU image run with a real runtime).
"""

from __future__ import annotations

import json
import os
import re
import shlex
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


def standin_path(tmp_path: Path, runtime: str) -> str:
    """PATH with the stand-in first under the runtime's name (Snakemake takes `apptainer` where it finds one, else
    `singularity`), then this interpreter's folder, standing in for the image's Python with the project's packages."""
    standin = tmp_path / "runtime"
    standin.mkdir()
    (standin / runtime).symlink_to(REPO / "tests" / "standin" / "apptainer")
    return f"{standin}:{Path(sys.executable).parent}:{os.environ['PATH']}"


def test_binds_are_parents_first_once_and_never_an_emulated_mount_point(tmp_path):
    """Seen with a real runtime: a tier's mount point bound onto itself is a mount point inside the container already,
    which the cell refuses to mount its tier over; a path under another bound path is bound by it (recursively)."""
    backing, mnt, shared = tmp_path / "hdd-backing", tmp_path / "mnt" / "hdd", tmp_path / "shared"
    for d in (backing, mnt, shared / "tier-a", tmp_path / "tier-b"):
        d.mkdir(parents=True)
    storage = {
        "disk-a": str(shared / "tier-a"),  # under an extra bind
        "disk-b": str(tmp_path / "tier-b"),
        "hdd": {"kind": "emulated", "path": str(backing), "model": "hdd-7200", "mount": str(mnt)},
    }
    cfg = tiny_config(
        tmp_path, storage=storage, loaders=["torchvision"], precisions=["fp32"], container={"binds": [str(shared)]}
    )
    cfg["baseline"]["tier"] = "disk-a"
    cfg_path = write_config(tmp_path, cfg)
    env = {**os.environ, "PATH": standin_path(tmp_path, "apptainer")}
    planned = snakemake(tmp_path, "--configfile", str(cfg_path), "--use-singularity", "-n", env=env)
    line = next(x for x in planned.stderr.splitlines() if "cell jobs run in the container" in x)
    args = line.split("(apptainer exec ", 1)[1].rsplit("); other jobs run on the host", 1)[0]
    bound = [v for k, v in zip(shlex.split(args), shlex.split(args)[1:], strict=False) if k == "--bind"]
    assert bound == sorted(bound, key=lambda p: Path(p).parts)  # parents first
    assert str(mnt) not in bound and str(mnt.parent) in bound  # the mount point's folder, not the point itself
    assert str(shared) in bound and str(shared / "tier-a") not in bound  # bound with its parent
    assert {str(backing), str(tmp_path / "tier-b"), str(REPO)} <= set(bound)


@pytest.mark.e2e
@pytest.mark.own_processes  # a cell in a container starts in it, not from a server outside
@pytest.mark.parametrize(
    ("runtime", "runtime_args", "runtime_env"),
    [
        ("apptainer", [], "APPTAINER_CONTAINER={image}"),
        # Singularity 2.x names the image by its file name; --cleanenv passes no host variable into the container
        ("singularity", ["--apptainer-args=--cleanenv"], "SINGULARITY_CONTAINER=cell.sif SINGULARITY_NAME=cell.sif"),
    ],
)
def test_use_singularity_runs_each_cell_in_the_container_with_nv_binds_and_image(
    tmp_path, runtime, runtime_args, runtime_env
):
    extra = tmp_path / "extra-bind"
    extra.mkdir()
    image = tmp_path / "cell.sif"
    cfg = tiny_config(
        tmp_path,
        precisions=["fp32"],
        storage={"disk-a": str(tmp_path / "tier-a")},
        container={"image": str(image), "binds": [str(extra)]},
    )
    image.write_bytes(b"stand-in image")
    cfg_path = write_config(tmp_path, cfg)
    log = tmp_path / "apptainer.jsonl"
    env = {**os.environ, "PATH": standin_path(tmp_path, runtime), "APPTAINER_STANDIN_LOG": str(log)}
    # what the cells must get from the command itself (a --cleanenv container inherits none of them)
    for name in ("LOADERBENCH_RUN_ID", "LOADERBENCH_GIT_COMMIT", "PYTHONPATH"):
        env.pop(name, None)
    args = ("--configfile", str(cfg_path), "--use-singularity", *runtime_args)
    planned = snakemake(tmp_path, *args, "-n", env=env)
    assert re.search(r"^cell\s+2$", planned.stdout, re.MULTILINE)
    assert f"the 2 cell jobs run in the container {image} (apptainer exec " in planned.stderr
    snakemake(tmp_path, *args, env=env)

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    execs = [c for c in calls if "exec" in c["argv"]]
    resolved = validate_config(cfg)
    assert len(execs) == len(cell_ids(resolved)) == 2  # only the cell jobs run in the container
    binds = {str(Path(t["path"]).resolve()) for t in resolved["storage"].values()} | {str(extra), str(REPO)}
    run_ids = set()
    for call in execs:
        argv = call["argv"]
        opts = argv[argv.index("exec") + 1 :]
        assert opts[:2] == ["--home", str(tmp_path)]  # Snakemake's own: the working directory as home
        assert "--nv" in opts
        assert ("--cleanenv" in opts) == bool(runtime_args)
        bound = {opts[k + 1] for k, a in enumerate(opts) if a == "--bind"}
        assert binds <= bound, binds - bound
        image_at = opts.index(str(image))
        assert opts[image_at + 1 : image_at + 3] == ["bash", "-c"]
        inner = opts[image_at + 3]
        # the cell calls the package through lb_cell (the shell prefix): in the container, the image's Python, with
        # the environment a cell needs set in the command
        lb_cell = re.search(r"lb_cell\(\) \{ (.*?) python3 -m loaderbench \"\$@\" (.*?); \}", inner)
        assert lb_cell, inner
        cell_env = dict(shlex.split(kv)[0].split("=", 1) for kv in re.findall(r"\w+=(?:'[^']*'|\S+)", lb_cell[1]))
        assert cell_env.keys() == {
            "PYTHONPATH",
            "LOADERBENCH_RUN_ID",
            "LOADERBENCH_GIT_COMMIT",
            "LOADERBENCH_CONTAINER_IMAGE",
        }
        assert cell_env["PYTHONPATH"] == str(REPO / "src")
        assert cell_env["LOADERBENCH_CONTAINER_IMAGE"] == str(image)
        assert re.fullmatch(r"[0-9a-f]{40}", cell_env["LOADERBENCH_GIT_COMMIT"])
        run_ids.add(cell_env["LOADERBENCH_RUN_ID"])
        # the host's lock directory (the test run's LOADERBENCH_LOCK_DIR), named
        assert f"--lock-dir {Path(os.environ['LOADERBENCH_LOCK_DIR']).resolve()}" in lb_cell[2]
        assert "lb_cell run-cell --spec" in inner
        if runtime_args:  # the stand-in's --cleanenv: nothing of the host's environment but PATH and HOME
            assert not [v for v in call["env"] if v.startswith("LOADERBENCH_") or v == "PYTHONPATH"], call["env"]
    assert len(run_ids) == 1  # one run
    for cid in cell_ids(resolved):
        rec = json.loads((tmp_path / "results/cells" / f"{cid}.json").read_text())
        assert rec["status"] == "ok"
        assert rec["provenance"]["container"] == {
            "in_container": True,
            "image": str(image),  # the workflow's absolute path, whatever the runtime sets
            "runtime_env": runtime_env.format(image=image),
        }
        assert rec["provenance"]["git"]["commit"] == cell_env["LOADERBENCH_GIT_COMMIT"]  # no .git in an image
        assert rec["provenance"]["run_id"] in run_ids
    table = (tmp_path / "results/tables/cells.csv").read_text()
    assert table.count("\n") == 1 + 2
