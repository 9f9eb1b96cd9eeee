"""`loaderbench run` measures again, once and within itself, the cells its verdict needs whose one window was
contended or did not converge; it never loops."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, tiny_config, write_config

pytestmark = pytest.mark.e2e


def test_a_reference_whose_window_did_not_converge_is_measured_again_once(tmp_path):
    """A precision no 1-second window reaches: every window ends unconverged, so the reference and the faster
    cells are measured again in a second pass, and not a third time."""
    cfg = tiny_config(
        tmp_path,
        loaders=["torchvision", "opencv", "synthetic"],
        precisions=["fp32"],
        window={"min_seconds": 0.5, "max_seconds": 1, "precision": 0.0001},
    )
    cfg["storage"] = {"disk": cfg["storage"]["disk-a"]}
    cfg["baseline"] = {**cfg["baseline"], "tier": "disk"}
    config = write_config(tmp_path, cfg)
    cmd = [sys.executable, "-m", "loaderbench", "run", "--config", str(config), "--directory", str(tmp_path)]
    cmd += ["--snakefile", str(REPO / "Snakefile"), "--cores", "2"]
    proc = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    reference = "torchvision_disk_g1_b4_fp32_dp_r0"
    record = json.loads((tmp_path / "results/cells" / f"{reference}.json").read_text())
    assert record["metrics"]["window"]["converged"] is False
    again = [line for line in out.splitlines() if line.startswith("measuring ")]
    assert (
        len(again) == 1 and "a verdict needs them, and their one window was contended or did not converge" in again[0]
    )
    assert f"  {reference}: needed by the verdict on disk" in out
    assert out.count(f"] {reference}  ") == 2  # measured in the first pass and once more
    assert "verdict (95% intervals" in out and "did not converge" in out
    # the next run has nothing to measure and measures nothing again
    proc = subprocess.run(cmd, check=False, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "measuring " not in proc.stdout, proc.stdout
