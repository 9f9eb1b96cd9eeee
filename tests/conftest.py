"""Shared fixtures: a small real generated dataset and a tiny CPU config for real Snakemake runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from loaderbench.data.dataset import DatasetParams, make_dataset
from loaderbench.data.emulated import fuse_available

REPO = Path(__file__).resolve().parents[1]

# What a test may lack on a fresh machine (scripts/install-test-deps.sh installs them as root; CI requires them):
# a skip whose reason names one is counted under it in the last line ("3 skipped (no FUSE)").
NEEDS = (("fuse", "no FUSE"), ("chromium", "no Chromium"), ("slurm", "no Slurm"))
FUSE_PROBLEM = fuse_available()
needs_fuse = pytest.mark.skipif(FUSE_PROBLEM is not None, reason=f"FUSE is not usable here: {FUSE_PROBLEM}")


def _skip_reason(report) -> str:
    text = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
    return text.removeprefix("Skipped: ")


def pytest_collection_modifyitems(config, items):
    """A test of the real pipeline (`e2e`) is slow too: `-m "not slow"` (make test-fast) leaves out both."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


UNMARKED_SLOW_S = 15.0  # a test without the slow mark that runs longer is named at the end (make test-fast)
_UNMARKED_SLOW: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" and "slow" not in report.keywords and report.duration > UNMARKED_SLOW_S:
        _UNMARKED_SLOW[report.nodeid] = report.duration


def pytest_report_teststatus(report, config):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report).lower()
        for word, label in NEEDS:
            if word in reason:
                return f"skipped ({label})", "s", "SKIPPED"
    return None


def pytest_terminal_summary(terminalreporter):
    """The skips counted by cause above, listed with their reasons (they leave pytest's own 'skipped' list), and the
    tests without the slow mark that took long."""
    for _, label in NEEDS:
        reports = terminalreporter.stats.get(f"skipped ({label})", [])
        if reports:
            terminalreporter.write_line(
                f"{len(reports)} skipped ({label}): {_skip_reason(reports[0])}; as root, "
                "scripts/install-test-deps.sh installs what they need"
            )
            for r in reports:
                terminalreporter.write_line(f"  SKIPPED {r.nodeid}")
    if _UNMARKED_SLOW:
        terminalreporter.write_line(
            f"{len(_UNMARKED_SLOW)} test(s) without the slow mark ran over {UNMARKED_SLOW_S:g} s: mark them "
            "@pytest.mark.slow if they run cells, Snakemake, a FUSE mount or a browser (make test-fast leaves those out)"
        )
        for nodeid, seconds in sorted(_UNMARKED_SLOW.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"  {seconds:.0f} s {nodeid}")


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """24 real generated JPEGs in 3 class folders (the ImageFolder root)."""
    out = tmp_path_factory.mktemp("dataset")
    make_dataset(DatasetParams(images=24, classes=3, seed=7), out, jobs=2)
    return out / "train"


class BacklogLoader:
    """Batches `ready` prepared ahead are there at once; each later one takes `make_s` to arrive (a loader slower
    than the step: the consumer waits)."""

    def __init__(self, ready: int, make_s: float):
        self.ready, self.make_s, self.given = ready, make_s, 0

    def __next__(self):
        self.given += 1
        if self.given > self.ready:
            time.sleep(self.make_s)
        return (self.given,)


class SimulatedClock:
    """Time for tests of the window's logic on constructed traces: `sleep` moves it on at once and each reading by
    1 us (the code between two readings), so a trace of sleeps is timed as designed however loaded the machine is."""

    def __init__(self):
        self.now = 1000.0

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now

    monotonic = perf_counter

    def time(self) -> float:
        return 1.7e9 + self.perf_counter()

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


@pytest.fixture
def simulated_clock(monkeypatch) -> SimulatedClock:
    """The `time` module's clocks and sleep replaced by a SimulatedClock for the test (pytest's own timing is not)."""
    clock = SimulatedClock()
    for name in ("perf_counter", "monotonic", "time", "sleep"):
        monkeypatch.setattr(time, name, getattr(clock, name))
    return clock


_STAGED: dict[Path, Path] = {}  # dataset -> the folder it was checked and staged in, once a test run


def staged_disk(tmp_path_factory, dataset: Path, name: str, **settings) -> tuple[Path, dict]:
    """`dataset` checked and staged (as dataset "ds" on a tier "disk"), and a validated config of that tier with the
    small CPU cells' settings (batch 4, 32 px crops, 1 worker, a 3-step window), `settings` over them. Returns
    (folder, config); the tier's manifest is `folder / "disk.json"`. The check and the staging are done once a
    test run for each dataset (the first caller's `name` names the folder): cells only read them, and a test that
    changes the tier works on a copy."""
    from loaderbench.core.config import validate_config
    from loaderbench.data.check import check_dataset
    from loaderbench.data.stage import stage

    tmp = _STAGED.get(dataset)
    if tmp is None:
        tmp = tmp_path_factory.mktemp(name)
        check_dataset(dataset, tmp / "check.json", tmp / "q", jobs=2)
        (tmp / "tier").mkdir()
        stage(tmp / "check.json", "disk", tmp / "tier", "ds", tmp / "disk.json")
        _STAGED[dataset] = tmp
    base = {
        "dataset": {"name": "ds"},
        "storage": {"disk": str(tmp / "tier")},
        "gpus": [1],
        "batch_sizes": [4],
        "precisions": ["fp32"],
        "window": {"steps": 3},
        "warmup_steps": 1,
        "crop_size": 32,
        "workers": 1,
        "prefetch_factor": 1,
    }
    return tmp, validate_config({**base, **settings})


def tiny_config(tmp: Path, **overrides) -> dict:
    """A grid of 8 cells (2 loaders x 2 tiers x 2 precisions) that runs in seconds per cell on a CPU."""
    cfg = {
        "name": "tiny",
        "dataset": {"source": "generated", "images": 32, "classes": 3, "seed": 1},
        "storage": {"disk-a": str(tmp / "tier-a"), "disk-b": str(tmp / "tier-b")},
        "loaders": ["torchvision", "opencv"],
        "gpus": [1],
        "batch_sizes": [4],
        "precisions": ["fp32", "amp"],
        "window": {"steps": 3},
        "warmup_steps": 1,
        "crop_size": 32,
        "workers": 1,
        "prefetch_factor": 1,
        "baseline": {"loader": "torchvision", "tier": "disk-a", "gpus": 1, "batch_size": 4, "precision": "fp32"},
        "probe": {"sequential_mb": 8},  # the tiers' streaming read: 8 MB of random bytes written and read, not 64
    }
    for tier in cfg["storage"].values():
        Path(tier).mkdir(parents=True, exist_ok=True)
    cfg.update(overrides)
    if "baseline" not in overrides:  # the baseline a grid of other axes measures: its first value of each
        _baseline_in_grid(cfg)
    return cfg


def _baseline_in_grid(cfg: dict) -> None:
    grid = cfg.get("parts") or [cfg]
    axes = {"loader": "loaders", "tier": "tiers", "batch_size": "batch_sizes", "precision": "precisions"}
    for key, axis in axes.items():
        values = [
            v for part in grid for v in (part.get(axis) or cfg.get(axis) or list(cfg["storage"]) * (key == "tier"))
        ]
        if values and cfg["baseline"][key] not in values:
            cfg["baseline"][key] = values[0]


def write_config(tmp: Path, cfg: dict) -> Path:
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake_command(workdir: Path, args: tuple[str, ...], env: dict | None) -> tuple[list[str], dict]:
    """The command line and environment of the real workflow (this repo's Snakefile and default profile) in
    `workdir`."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        *args,
    ]
    return cmd, {**(env or os.environ), "PYTHONUNBUFFERED": "1"}


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: float = 900, env: dict | None = None, **popen
) -> subprocess.CompletedProcess:
    """Run the real workflow (this repo's Snakefile and default profile) in `workdir`."""
    cmd, env = _snakemake_command(workdir, args, env)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env, **popen, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def start_snakemake(workdir: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """Start the real workflow in `workdir` as `snakemake` runs it, without waiting for it: for a test that kills it.
    It leads a session of its own, so that its process group (Snakemake, the cell runners, the training) can be
    killed at once as a lost node would be; its output is discarded."""
    cmd, env = _snakemake_command(workdir, args, env)
    return subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )


def cell_record(work: Path, cell_id: str) -> dict:
    """The record of one cell of the run in `work`."""
    return json.loads((work / "results/cells" / f"{cell_id}.json").read_text())


def record_parts(host: dict | None = None) -> dict:
    """What a cell runner hands `records.make_record` beside the metrics, as little of it as a valid record holds
    (made-up; `host` over the made-up host)."""
    versions = dict.fromkeys(("python", "torch", "torchvision", "opencv", "pillow", "cuda", "driver"))
    host = {"cpu_model": "made-up CPU", "cpus_usable": 2, "gpu_models": [], **(host or {})}
    container = {"in_container": False, "image": None}
    prov = {"versions": versions, "host": host, "tier": None, "git": None, "container": container}
    return {"wall_s": 1.0, "provenance": prov}


def ok_metrics(**metrics) -> dict:
    """An ok cell's metrics as a valid record holds them: each required one unknown (None) but those the schema holds
    to a type, made-up; `metrics` over them."""
    required = yaml.safe_load((REPO / "src/loaderbench/schemas/cell.schema.yaml").read_text())
    names = required["properties"]["metrics"]["oneOf"][1]["required"]
    parallel = {"mode": "dp", "processes": 1, "backend": None, "wrapper": None, "per_rank": []}
    typed = {"time_s": 1.0, "steps": 1, "samples_per_s": 1.0, "warnings": [], "parallel": parallel}
    typed["device"] = {"type": "cpu", "count": 0, "used": []}
    return {**dict.fromkeys(names), **typed, **metrics}


def cells_with_au(rows: list[dict]) -> pd.DataFrame:
    """Made-up rows of the cells table (of MobileNetV2 where a row names no model) with their AU against the
    synthetic row of the same configuration, and its interval where the rows have theirs (`halfwidth`)."""
    from loaderbench.report.ratios import au_interval, bounds

    t = pd.DataFrame([{"model": "mobilenet_v2", **r} for r in rows])
    synth = t[t["loader"] == "synthetic"].set_index(["gpus", "batch_size", "precision", "parallel"])["samples_per_s"]
    t["au"] = [
        r["samples_per_s"] / synth.get((r["gpus"], r["batch_size"], r["precision"], r["parallel"]), np.nan)
        for _, r in t.iterrows()
    ]
    bounds(t, "au", au_interval(t))
    return t


def cells_table(work: Path) -> pd.DataFrame:
    """The table of every cell of the run in `work` (results/tables/cells.csv)."""
    return pd.read_csv(work / "results/tables/cells.csv")


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, warm_server) -> tuple[Path, Path]:
    """One complete run of the tiny grid with a third loader (synthetic), as (its folder, its config file): the
    session runs it once for every test that reads or re-plans it. Such a test may re-measure a cell, but leaves every
    record and table in place: the others read it in any order.

    disk-b is an emulated HDD: a real FUSE mount over tier-b, throttled to one head (CI installs fuse3). Without FUSE it
    is a plain tier, so that the tests that need no emulated tier still run."""
    work = tmp_path_factory.mktemp("run")
    disk_b = {
        "kind": "emulated",
        "path": str(work / "tier-b"),
        "mount": str(work / "mnt-b"),
        "model": {"name": "test-hdd", "access_ms": 5, "bandwidth_mb_s": 100, "concurrency": 1},
    }
    if FUSE_PROBLEM:
        disk_b = str(work / "tier-b")
    cfg = tiny_config(
        work, loaders=["torchvision", "opencv", "synthetic"], storage={"disk-a": str(work / "tier-a"), "disk-b": disk_b}
    )
    cfg_path = write_config(work, cfg)
    from loaderbench.engine.contract import ENV_SOCKET

    snakemake(work, "--configfile", str(cfg_path), env={**os.environ, ENV_SOCKET: str(warm_server)})
    return work, cfg_path


@pytest.fixture(scope="session")
def warm_server(tmp_path_factory) -> Path:
    """The test run's warm-start server (`loaderbench.engine.process.warmstart`, as the workflow's `onstart` starts one
    for a run): it imports torch and the training code once, and forks a measuring process per cell of the tests that
    ask for `warm_cells`. Stopped at the run's end."""
    sock = tmp_path_factory.mktemp("warm") / "s.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderbench.engine.process.warmstart", str(sock)], stdin=subprocess.DEVNULL
    )
    deadline = time.time() + 120  # the socket is bound before the imports; a cell that asks early waits for them
    while not sock.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert sock.exists(), f"the warm-start server did not open {sock} (exit status {proc.poll()})"
    yield sock
    proc.terminate()
    proc.wait(timeout=30)


def _shares_the_warm_server(node) -> bool:
    return bool(node.get_closest_marker("slow")) and not node.get_closest_marker("own_processes")


@pytest.fixture(autouse=True, scope="module")
def shared_warm_server_of_module(request):
    """A slow module's runs - its module-scoped pipelines included - fork their measuring processes from the test
    run's one warm-start server (see `shared_warm_server`)."""
    if not _shares_the_warm_server(request.node):
        yield
        return
    from loaderbench.engine.contract import ENV_SOCKET

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_SOCKET, str(request.getfixturevalue("warm_server")))
        yield


@pytest.fixture(autouse=True)
def shared_warm_server(request, monkeypatch):
    """Every slow test's pipelines and cells fork their measuring processes from the test run's one warm-start server
    (a Snakemake finds it in LOADERBENCH_WARM_SOCKET and starts none of its own), instead of each run importing torch
    in a server of its own: seconds a pipeline, over a hundred pipelines. Not for a test marked `own_processes`: one
    of which process starts what, or of a process tree (a pipeline killed with its descendants, Slurm jobs, cells in
    a container), which needs a run's own server or none."""
    from loaderbench.engine.contract import ENV_SOCKET

    if request.node.get_closest_marker("own_processes"):
        monkeypatch.delenv(ENV_SOCKET, raising=False)
    elif _shares_the_warm_server(request.node):
        monkeypatch.setenv(ENV_SOCKET, str(request.getfixturevalue("warm_server")))
    yield


@pytest.fixture
def warm_cells(warm_server, monkeypatch) -> Path:
    """Cells run by this test (in its process, or by the Snakemake or CLI it starts) fork their measuring processes
    from the test run's warm-start server, as a pipeline's cells do, instead of each starting an interpreter and
    importing torch. Not for a test of process starts themselves (which process, whose child, which server)."""
    from loaderbench.engine.contract import ENV_SOCKET

    monkeypatch.setenv(ENV_SOCKET, str(warm_server))
    return warm_server


@pytest.fixture(autouse=True, scope="session")
def own_lock_dir(tmp_path_factory):
    """This test session's own host-lock directory: parallel test runs (other checkouts, other users) are not
    serialised through the shared /tmp/loaderbench-locks. Child processes (Snakemake, cells) inherit it."""
    before = os.environ.get("LOADERBENCH_LOCK_DIR")
    os.environ["LOADERBENCH_LOCK_DIR"] = str(tmp_path_factory.mktemp("locks"))
    yield Path(os.environ["LOADERBENCH_LOCK_DIR"])
    if before is None:
        os.environ.pop("LOADERBENCH_LOCK_DIR", None)
    else:
        os.environ["LOADERBENCH_LOCK_DIR"] = before


@pytest.fixture
def small_filesystem(tmp_path):
    """make(size_kb): a real tmpfs of that size (a tier too small, a disk to fill); unmounted afterwards."""
    mounts = []

    def make(size_kb: int) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
        d = tmp_path / f"fs{len(mounts)}"
        d.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(d)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode:
            pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
        mounts.append(d)
        return d

    yield make
    for d in mounts:
        subprocess.run(["umount", str(d)], check=False)


@pytest.fixture
def workdir(tmp_path) -> Path:
    yield tmp_path
    shutil.rmtree(tmp_path / ".snakemake", ignore_errors=True)
