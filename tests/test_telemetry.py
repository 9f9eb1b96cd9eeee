"""The resource sampler: real psutil sampling of a real process tree, window summaries, the timeline CSV.

The GPU columns need NVML, which cannot exist on these CPU-only machines (no NVIDIA driver): one test stands
in a fake `pynvml` module for them, and says so. The real NVML path ran on the H200 (docs/results/2026-11-29-h200x1/
telemetry-probe)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
import types

import pandas as pd
import pytest

from loaderbench.engine.runner import telemetry


def _busy_child(seconds: float) -> subprocess.Popen:
    code = f"import time\nt=time.time()\nwhile time.time()-t<{seconds}: sum(range(10000))"
    return subprocess.Popen([sys.executable, "-c", code])


def test_sampler_follows_a_process_tree_and_summarises_the_window(tmp_path):
    child = _busy_child(2.0)
    s = telemetry.Sampler(20, [child.pid], tmp_path, gpus=0).start()
    t0 = time.time()
    child.wait()
    t1 = time.time()
    timeline = s.stop()
    assert len(timeline["rows"]) >= 20  # about 20 Hz for about 2 s
    assert timeline["meta"]["gpu_reason"] == "the cell uses no GPU"
    marks = {"setup_start": t0, "warmup_start": t0 + 0.2, "window_start": t0 + 0.5, "window_end": t1 - 0.2}
    summary = telemetry.summarize(timeline, marks)
    assert summary["hz"] == pytest.approx(20, rel=0.3)
    # the child spun one core: at least one core's worth of busy CPU across all cores in the window
    assert summary["cpu_cores_busy"] >= 0.6
    assert summary["rss_mb"]["max"] > 1  # the child's RSS was found through the tree
    assert summary["sample_cost_ms"] < 50 and summary["gpus"] == []
    csv = pd.read_csv(io.StringIO(telemetry.to_csv(timeline, marks)))
    assert set(csv["phase"]) >= {"setup", "warmup", "window", "teardown"}
    assert (csv["s"].diff().dropna() > 0).all()


def test_block_device_is_named_or_its_absence_explained(tmp_path):
    name, note = telemetry.block_device_of(tmp_path)
    assert (name and "block device" in note) or (name is None and "no block device" in note)
    name, note = telemetry.block_device_of("/dev/shm")
    assert name is None and "tmpfs" in note


def test_gpu_columns_with_a_stand_in_nvml(monkeypatch, tmp_path):
    """A stand-in for NVML (no driver can exist here): utilisation and memory per sample, PCIe from its own thread."""
    calls = {"pcie": 0}

    def pcie(handle, counter):
        calls["pcie"] += 1
        time.sleep(0.02)  # NVML's counter blocks about 20 ms
        return 2_000_000 if counter == 1 else 500_000  # KB/s

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=90 + h, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=(h + 1) * 2**30),
        nvmlDeviceGetPcieThroughput=pcie,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        nvmlDeviceGetClockInfo=lambda h, clock: 1980 - 300 * h if clock == 1 else 0,
        NVML_CLOCK_SM=1,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x40 if h else 0,  # GPU 1: power cap, thermal
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(telemetry, "PCIE_PERIOD_S", 0.2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    s = telemetry.Sampler(20, [], tmp_path, gpus=2).start()
    time.sleep(1.5)
    timeline = s.stop()
    summary = telemetry.summarize(timeline, None)
    assert summary["hz"] == pytest.approx(20, rel=0.3)  # the blocking PCIe reads do not slow the loop
    assert [g["index"] for g in summary["gpus"]] == [0, 1]
    assert summary["gpus"][1]["util_pct"]["mean"] == 91 and summary["gpus"][1]["mem_mb"]["max"] == 2048
    assert summary["gpus"][0]["pcie_rx_mb_s"]["mean"] == 2000 and summary["gpus"][1]["pcie_tx_mb_s"]["mean"] == 500
    assert calls["pcie"] >= 4 and summary["pcie"].startswith("NVML PCIe")
    assert summary["gpus"][0]["sm_mhz"]["p50"] == 1980 and summary["gpus"][0]["clock_reasons"] == []
    assert summary["gpus"][1]["sm_mhz"]["max"] == 1680
    assert summary["gpus"][1]["clock_reasons"] == ["software power cap", "hardware thermal slowdown"]
