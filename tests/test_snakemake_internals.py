"""The Snakemake internals the workflow relies on (workflow/rules/common.smk, the Snakefile), checked on the installed
Snakemake without running the pipeline: a dry run of a tiny workflow that touches each one as common.smk does. One
that moved fails here by name, instead of a real run failing, or quietly measuring the wrong thing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

# What the probe workflow below reads, and how common.smk uses each: a failure names the internal and its use.
INTERNALS = {
    "snakemake.utils.min_version": "the Snakefile's minimum version",
    "snakemake.utils.update_config": "the embedded default config with --config overrides on top",
    "snakemake.settings.types.DeploymentMethod": "CONDA/APPTAINER: whether host jobs use HOST_ENV, cells the container",
    "workflow.deployment_settings.deployment_method": "--use-conda / --use-singularity, read at parse time",
    "workflow.deployment_settings.apptainer_args": "read and completed with --nv and the binds a cell needs",
    "workflow.configfiles": "no --configfile: the embedded default config/quickstart.yaml is used",
    "workflow.basedir": "the checkout: the default config, the captions, the source bound into the container",
    "workflow.local_exec": "the warm-start server is started only where jobs run on this host",
    "workflow.is_main_process": "a cluster job's Snakemake forces nothing and makes the lock directory itself",
    "workflow.dag": "None while parsing, the DAG while input functions run",
    "DAG.forcefiles": "an unreadable cell record's job is forced as --forcerun would",
    "shell.prefix": "the lb, lb_cell and lb_probe shell functions of every rule's command",
}

PROBE = """
import json
from pathlib import Path

SEEN = {}


def probe(name, get):
    try:
        SEEN[name] = get()
    except Exception as e:
        SEEN[name] = {"error": f"{type(e).__name__}: {e}"}


def _versions():
    from snakemake.utils import min_version

    min_version("8.20")
    return True


def _update_config():
    from snakemake.utils import update_config

    raw = {"a": 1, "b": {"c": 2}}
    update_config(raw, {"b": {"c": 3}})
    return raw


def _methods():
    from snakemake.settings.types import DeploymentMethod

    used = workflow.deployment_settings.deployment_method
    return {"conda": DeploymentMethod.CONDA in used, "apptainer": DeploymentMethod.APPTAINER in used}


def _apptainer_args():
    before = workflow.deployment_settings.apptainer_args
    workflow.deployment_settings.apptainer_args = before + " --nv"
    return [before, workflow.deployment_settings.apptainer_args]


def _shell_prefix():
    shell.prefix("set -euo pipefail; ")
    return True


probe("snakemake.utils.min_version", _versions)
probe("snakemake.utils.update_config", _update_config)
probe("snakemake.settings.types.DeploymentMethod", _methods)
probe("workflow.deployment_settings.deployment_method", lambda: sorted(m.name for m in workflow.deployment_settings.deployment_method))
probe("workflow.deployment_settings.apptainer_args", _apptainer_args)
probe("workflow.configfiles", lambda: [Path(p).name for p in workflow.configfiles])
probe("workflow.basedir", lambda: str(workflow.basedir))
probe("workflow.local_exec", lambda: workflow.local_exec)
probe("workflow.is_main_process", lambda: workflow.is_main_process)
probe("workflow.dag", lambda: {"at_parse": repr(workflow.dag)})
probe("shell.prefix", _shell_prefix)


def forced(wildcards):
    probe("workflow.dag", lambda: {**SEEN["workflow.dag"], "in_input_function": type(workflow.dag).__name__})
    probe("DAG.forcefiles", lambda: workflow.dag.forcefiles.add("made.txt") or type(workflow.dag.forcefiles).__name__)
    Path("seen.json").write_text(json.dumps(SEEN))
    return []


rule all:
    input:
        "made.txt",


rule make:
    input:
        forced,
    output:
        "made.txt",
    shell:
        "touch {output}"
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict:
    """What the probe workflow found, dry-run with a --configfile, --use-conda and --use-singularity (neither tool
    needed for a dry run) and an existing output that only DAG.forcefiles makes run again."""
    tmp = tmp_path_factory.mktemp("snakemake-internals")
    (tmp / "Snakefile").write_text(PROBE)
    (tmp / "config.yaml").write_text("a: 1\n")
    (tmp / "made.txt").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", "config.yaml"]
        + ["--software-deployment-method", "conda", "apptainer", "--apptainer-args=--bind /x"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0 and (tmp / "seen.json").is_file(), f"the probe workflow failed:\n{proc.stderr}"
    return {"dir": str(tmp), "dry_run": proc.stdout, **json.loads((tmp / "seen.json").read_text())}


def _installed() -> str:
    from snakemake import __version__

    return __version__


def _expect(seen: dict, name: str, want) -> None:
    got = seen[name]
    assert got == want, (
        f"Snakemake {_installed()}: {name} ({INTERNALS[name]}) gave {got!r}, not {want!r}: it moved or changed; "
        "adapt workflow/rules/common.smk to it, or keep snakemake below this version in pyproject.toml"
    )


def test_every_internal_the_workflow_touches_is_probed():
    used = (REPO / "workflow/rules/common.smk").read_text() + (REPO / "Snakefile").read_text()
    for name in INTERNALS:
        attr = name.removeprefix("snakemake.").rsplit(".", 1)[-1]
        assert attr in used, f"{name} is no longer used by the workflow: drop it from INTERNALS and the probe"


def test_the_pyproject_caps_snakemake_below_the_next_major_of_the_installed_one():
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if d.startswith("snakemake")]
    major = int(_installed().split(".")[0])
    assert f"<{major + 1}" in pin.replace(" ", ""), f"{pin}: cap it below {major + 1} (the internals are checked)"


@pytest.mark.parametrize(
    "name, want",
    [
        ("snakemake.utils.min_version", True),
        ("snakemake.utils.update_config", {"a": 1, "b": {"c": 3}}),
        ("snakemake.settings.types.DeploymentMethod", {"conda": True, "apptainer": True}),
        ("workflow.deployment_settings.deployment_method", ["APPTAINER", "CONDA"]),
        ("workflow.deployment_settings.apptainer_args", ["--bind /x", "--bind /x --nv"]),
        ("workflow.configfiles", ["config.yaml"]),
        ("workflow.local_exec", True),
        ("workflow.is_main_process", True),
        ("workflow.dag", {"at_parse": "None", "in_input_function": "DAG"}),
        ("DAG.forcefiles", "set"),
        ("shell.prefix", True),
    ],
)
def test_the_internal_is_where_the_workflow_reads_it(seen, name, want):
    _expect(seen, name, want)


def test_workflow_basedir_is_the_snakefiles_folder(seen):
    _expect(seen, "workflow.basedir", seen["dir"])


def test_a_file_added_to_the_dags_forcefiles_by_an_input_function_runs_its_job_again(seen):
    """made.txt exists and is newer than its (no) inputs: only the forced file makes its job run."""
    assert "forced:\n        make" in seen["dry_run"], (
        f"Snakemake {_installed()}: DAG.forcefiles ({INTERNALS['DAG.forcefiles']}) is no longer read when the DAG "
        f"decides what runs; dry run:\n{seen['dry_run']}"
    )
