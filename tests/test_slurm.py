"""The same DAG on a real single-node Slurm cluster through snakemake-executor-plugin-slurm.

Debian's munge, slurmctld and slurmd are started by the test (tests/slurm_cluster.py; `.ci/run` installs them) and
stopped by pid at the end. Every cell must run as its own Slurm job (the job id is in its record), host-side jobs
locally, and the bundle must have the same structure as a local run of the same grid.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from loaderbench.core.cells import cell_ids
from loaderbench.core.config import validate_config
from tests.conftest import REPO, snakemake, tiny_config, write_config
from tests.slurm_cluster import missing, running, slurm_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.own_processes]


@pytest.fixture
def cluster(tmp_path):
    lacking = missing()
    if lacking:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm test; missing: {', '.join(lacking)} (.ci/run installs them)")
        pytest.skip(f"no Slurm here: missing {', '.join(lacking)}")
    with slurm_cluster(tmp_path / "slurm") as (env, daemons):
        assert [name for name, _ in daemons] == ["munged", "slurmctld", "slurmd"]
        yield env
    alive = [name for name, pid in daemons if running(pid)]
    assert not alive, f"still running after the test: {alive}"


def bundle_structure(work: Path) -> set[str]:
    return {str(p.relative_to(work / "results/bundle")) for p in (work / "results/bundle").rglob("*") if p.is_file()}


def test_tiny_grid_runs_as_slurm_jobs_and_matches_a_local_run(tmp_path, cluster):
    cfg = tiny_config(
        tmp_path,
        precisions=["fp32"],
        storage={"disk-a": str(tmp_path / "tier-a")},
        slurm={"request_gpus": False, "cpus_per_gpu": 1, "mem_mb_per_gpu": 2000, "runtime_min": 10},
    )
    slurm_work, local_work = tmp_path / "on-slurm", tmp_path / "local"
    for work in (slurm_work, local_work):
        work.mkdir()
    cfg_path = write_config(tmp_path, cfg)

    started = time.time()
    out = snakemake(
        slurm_work,
        "--profile",
        str(REPO / "profiles/slurm"),
        "--configfile",
        str(cfg_path),
        "--slurm-no-account",
        env=cluster,
    )
    slurm_s = time.time() - started
    submitted = dict(
        re.findall(r"has been submitted with SLURM jobid (\d+) \(log: \S+/rule_(\w+)/", out.stdout + out.stderr)
    )
    ids = cell_ids(validate_config(cfg))
    job_ids = {}
    for cid in ids:
        rec = json.loads((slurm_work / "results/cells" / f"{cid}.json").read_text())
        assert rec["status"] == "ok", rec["reason"]
        job_ids[cid] = rec["provenance"]["scheduler"]["slurm_job_id"]
        # no warm-start server for jobs on other nodes: the submit host's would not be theirs
        assert [s["warm"] for s in rec["process_start"]] == [False] and "unset" in rec["process_start"][0]["how"]
    assert all(job_ids.values()) and len(set(job_ids.values())) == len(ids) == 2  # one Slurm job per cell
    assert set(submitted) == set(job_ids.values()) and set(submitted.values()) == {"cell"}  # nothing else went there
    print(
        f"\nSlurm run: {slurm_s:.1f} s, cell jobs: " + ", ".join(f"{c}={j}" for c, j in sorted(job_ids.items())),
        file=sys.stderr,
    )

    snakemake(local_work, "--configfile", str(cfg_path))
    assert bundle_structure(slurm_work) == bundle_structure(local_work)
    t_slurm = pd.read_csv(slurm_work / "results/tables/cells.csv")
    t_local = pd.read_csv(local_work / "results/tables/cells.csv")
    assert list(t_slurm.columns) == list(t_local.columns)
    keys = ["Dataloader", "Disk", "GPU", "Batch size", "Precision", "Status"]
    assert t_slurm[keys].sort_values(keys).values.tolist() == t_local[keys].sort_values(keys).values.tolist()


def test_a_cluster_left_by_a_killed_test_run_is_stopped_before_the_next(tmp_path):
    """A run killed inside the cluster (no teardown) leaves daemons holding Slurm's ports; the next start clears them."""
    import signal
    import subprocess

    from tests.slurm_cluster import CONF, clean_stale

    if missing():
        pytest.skip(f"no Slurm here: missing {', '.join(missing())}")
    script = (
        "import sys, time; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from tests.slurm_cluster import slurm_cluster\n"
        "with slurm_cluster(Path(sys.argv[2])):\n    print('up', flush=True); time.sleep(600)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(REPO), str(tmp_path / "killed")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGKILL)  # no teardown
    proc.wait()
    assert "loaderbench-test" in CONF.read_text()
    assert sorted(clean_stale()) == ["munged", "slurmctld", "slurmd"]
    assert not CONF.exists()
    with slurm_cluster(tmp_path / "next") as (_env, daemons):  # the ports are free again
        assert [n for n, _ in daemons] == ["munged", "slurmctld", "slurmd"]
