"""`loaderbench run`: the pipeline's terminal says a line per cell and stage, keeps Snakemake's job dumps in its log,
brings a failure to the terminal with its log's path and last lines, and ends on the verdict."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from itertools import takewhile
from pathlib import Path

import pytest

from loaderbench.cli.run import CELLS_FAILED
from tests.conftest import REPO, tiny_config, write_config

pytestmark = pytest.mark.slow

RAISING_MODEL = """
def build(num_classes):
    raise ValueError(f"no width for {num_classes} classes")
"""


def run(work: Path, config: Path, *more: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`loaderbench run` as `make quickstart` calls it, on this repo's workflow, its output as a pipe shows it."""
    cmd = [
        sys.executable,
        "-m",
        "loaderbench",
        "run",
        "--config",
        str(config),
        "--directory",
        str(work),
        "--cores",
        "2",
    ]
    cmd += ["--snakefile", str(REPO / "Snakefile"), *more]
    return subprocess.run(
        cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=900, env=env or os.environ.copy()
    )


def test_the_terminal_says_a_line_per_cell_a_failed_cell_with_its_log_and_ends_on_the_verdict_and_the_failed(tmp_path):
    """Cells that fail among ok ones: each is said as it ends, with its log; the run ends on the verdict, then the
    failed cells by id with their reason, and exits non-zero."""
    (tmp_path / "raising_net.py").write_text(textwrap.dedent(RAISING_MODEL))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    env.pop("LOADERBENCH_WARM_SOCKET", None)
    cfg = tiny_config(
        tmp_path,
        loaders=["torchvision", "synthetic"],
        precisions=["fp32"],
        models=["mobilenet_v2", "raising_net:build"],
        window={"min_seconds": 1, "max_seconds": 2, "precision": 0.5},  # adaptive: a window with its interval
    )
    cfg["storage"] = {"disk-a": cfg["storage"]["disk-a"]}
    proc = run(tmp_path, write_config(tmp_path, cfg), env=env)
    out = proc.stdout.splitlines()
    assert proc.returncode == CELLS_FAILED, proc.stdout + proc.stderr
    # Snakemake's job dumps stay in its log, whose path is said first
    assert out[0].startswith("pipeline: Snakemake's output in ") and not proc.stderr.strip()
    log = Path(out[0].split(" in ", 1)[1])
    assert "jobid:" in log.read_text() and not any("jobid" in line or "rule " in line for line in out)
    cells = [line for line in out if re.match(r"  \[\d/4(, ~.* left)?\] ", line)]
    assert len(cells) == 4  # 2 loaders x 2 models, one tier
    ok = next(line for line in cells if "torchvision_disk-a_g1_b4_fp32_dp_r0 " in line)
    assert re.search(r" \d+ samples/s \((\+-\d+%|no interval: \d+ steps)\), waits for data \d+% of a step", ok)
    at = out.index(next(line for line in cells if "torchvision_disk-a_g1_b4_fp32_dp_raising-net_r0 " in line))
    # its reason in full, wrapped at spaces (its later lines indented), then its log
    failed = " ".join([out[at], *(line.strip() for line in takewhile(lambda x: x.startswith("      "), out[at + 1 :]))])
    assert "failed: " in failed and "raised ValueError: no width for 3 classes" in failed
    cell_log = Path(failed.split("; log: ")[1])
    assert cell_log.is_file() and "no width for 3 classes" in cell_log.read_text()
    staged = out.index(next(line for line in out if line.endswith("dataset staged on disk-a")))
    probed = out.index(next(line for line in out if line.endswith("disk-a probed")))
    assert staged < probed < out.index(cells[0])  # the tier is probed before its first cell, as the terminal says
    # the end: the bundle's path, then the verdict (a CPU here: named so)
    at = next(i for i, line in enumerate(out) if line.startswith("bundle: "))
    assert Path(out[at].split()[1]).is_file()
    assert out[at + 1].startswith("verdict (95% intervals") and out[at + 2].startswith(
        "  CPU, disk-a: torchvision b4 fp32 is "
    )
    # then the failed cells: both of the raising model, by id, with its reason
    listing = out[out.index(next(line for line in out if "cells failed" in line)) :]
    assert listing[0].startswith(f"2 of 4 cells failed (so the run exits with status {CELLS_FAILED}; ")
    raising = {f"{loader}_disk-a_g1_b4_fp32_dp_raising-net_r0" for loader in ("torchvision", "synthetic")}
    reason = json.loads((tmp_path / f"results/cells/{min(raising)}.json").read_text())["reason"]
    named, _, why = " ".join(line.strip() for line in listing[1:]).partition(": ")
    assert set(named.split(", ")) == raising and why == " ".join(reason.split())
    assert len(out) <= 36, proc.stdout


def test_a_failed_job_reaches_the_terminal_with_its_rule_log_path_and_last_lines(tmp_path):
    """A workflow whose one job fails (a real Snakemake run): its rule, its log's path and its last lines are said."""
    (tmp_path / "Snakefile").write_text(
        textwrap.dedent(
            """
            rule all:
                input: "out.txt"

            rule broken:
                output: "out.txt"
                log: "logs/broken.log"
                shell: "echo 'reading the images' > {log}; echo 'the disk went away' >> {log}; exit 3"
            """
        )
    )
    config = write_config(tmp_path, tiny_config(tmp_path))
    cmd = [sys.executable, "-m", "loaderbench", "run", "--config", str(config), "--directory", str(tmp_path)]
    cmd += ["--snakefile", str(tmp_path / "Snakefile"), "--cores", "1"]
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode != 0
    assert f"ERROR in rule broken; its log: {tmp_path / 'logs/broken.log'}" in out
    assert "    | reading the images\n    | the disk went away" in out
    assert "pipeline FAILED (Snakemake exit 1)" in out and "bundle:" not in out


def test_a_driver_killed_outright_takes_its_pipeline_with_it(tmp_path):
    """SIGKILL to `loaderbench run` (a closed terminal's session, an OOM kill): its Snakemake gets SIGTERM, stops its
    jobs and lets go of its lock, instead of running on with nobody to tell; the next run takes the directory."""
    import signal
    import time

    import psutil

    work = tmp_path / "work"
    work.mkdir()
    config = write_config(work, tiny_config(work, window={"seconds": 30}))
    cmd = [sys.executable, "-m", "loaderbench", "run", "--config", str(config), "--directory", str(work)]
    cmd += ["--cores", "2", "--snakefile", str(REPO / "Snakefile")]
    driver = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    smk = []
    while time.time() < deadline and not smk:  # until Snakemake holds the directory
        smk = [p for p in psutil.Process(driver.pid).children() if "snakemake" in " ".join(p.cmdline())]
        smk = smk if smk and any((work / ".snakemake/locks").glob("*")) else []
        time.sleep(0.2)
    assert smk, "Snakemake never started"
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    _, alive = psutil.wait_procs(smk, timeout=60)
    assert not alive, f"Snakemake {alive[0].pid} outlived its driver"
    assert not any((work / ".snakemake/locks").glob("*")), "the killed pipeline kept its lock"
