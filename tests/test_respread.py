"""Configurations whose repeats disagree are requeued once: records moved aside, a ledger, the old spread shown."""

from __future__ import annotations

import json

import pandas as pd

from loaderbench.plan.respread import respread, spreads
from loaderbench.report.aggregate import aggregate


def record(cid, sps, status="ok"):
    loader, tier, g, b, prec, par, r = cid.split("_")
    return {
        "cell_id": cid,
        "status": status,
        "reason": None if status == "ok" else "x",
        "spec": {
            "loader": loader,
            "tier": tier,
            "gpus": int(g[1:]),
            "batch_size": int(b[1:]),
            "precision": prec,
            "parallel": par,
            "repeat": int(r[1:]),
        },
        "metrics": {"samples_per_s": sps, "time_s": 10.0, "steps": 10} if status == "ok" else None,
    }


def write(cells, records):
    cells.mkdir(parents=True, exist_ok=True)
    for rec in records:
        (cells / f"{rec['cell_id']}.json").write_text(json.dumps(rec))


def test_spread_over_the_threshold_is_requeued_once(tmp_path):
    cells, ledger = tmp_path / "results/cells", tmp_path / "results/respread.json"
    steady = [record(f"torchvision_ssd_g1_b128_fp32_dp_r{i}", v) for i, v in enumerate((100, 102, 101))]
    noisy = [record(f"opencv_ssd_g1_b128_fp32_dp_r{i}", v) for i, v in enumerate((100, 120, 101))]
    write(cells, steady + noisy)
    s = spreads(steady + noisy)
    assert round(s["opencv_ssd_g1_b128_fp32_dp"]["spread"], 3) == round(20 / 101, 3)
    assert respread(cells, 0.05, ledger) == ["opencv_ssd_g1_b128_fp32_dp"]
    assert sorted(p.name for p in cells.glob("*.json")) == [
        f"torchvision_ssd_g1_b128_fp32_dp_r{i}.json" for i in range(3)
    ]
    assert len(list((cells / "superseded").glob("opencv_*.json"))) == 3
    # the rerun is as noisy again: it is not requeued a second time
    write(cells, [record(f"opencv_ssd_g1_b128_fp32_dp_r{i}", v) for i, v in enumerate((90, 110, 100))])
    assert respread(cells, 0.05, ledger) == []
    table = aggregate(
        sorted(cells.glob("*.json")),
        {"loader": "torchvision", "tier": "ssd", "gpus": 1, "batch_size": 128, "precision": "fp32"},
        0.05,
        tmp_path / "results/tables",
        ledger=ledger,
    )
    row = table[table["loader"] == "opencv"].iloc[0]
    assert row["spread_flag"] and round(row["spread_before_rerun"], 3) == round(20 / 101, 3)
    assert pd.isna(table[table["loader"] == "torchvision"].iloc[0]["spread_before_rerun"])


def test_a_contended_cell_requeues_its_configuration_once_and_says_why(tmp_path):
    cells, ledger = tmp_path / "results/cells", tmp_path / "results/respread.json"
    quiet = [record(f"torchvision_ssd_g1_b128_fp32_dp_r{i}", v) for i, v in enumerate((100, 101))]
    busy = [record(f"opencv_ssd_g1_b128_fp32_dp_r{i}", v) for i, v in enumerate((100, 101))]
    single = [record("opencv_ssd_g1_b128_amp_dp_r0", 200)]  # one repeat: no spread, but contended
    for r in quiet + busy + single:
        r["contention"] = {"contended": False, "foreign_cpu_cores": 0.1}
    busy[1]["contention"] = {"contended": True, "foreign_cpu_cores": 1.2}
    single[0]["contention"] = {"contended": True, "foreign_cpu_cores": 0.9}
    write(cells, quiet + busy + single)
    from loaderbench.plan.respread import requeue

    got = requeue(cells, 0.05, ledger)
    assert sorted(got) == ["opencv_ssd_g1_b128_amp_dp", "opencv_ssd_g1_b128_fp32_dp"]
    assert got["opencv_ssd_g1_b128_fp32_dp"].startswith("contended window in opencv_ssd_g1_b128_fp32_dp_r1")
    assert "spread" not in got["opencv_ssd_g1_b128_fp32_dp"]  # its repeats agree: contention alone requeued it
    assert sorted(p.name for p in cells.glob("*.json")) == [
        f"torchvision_ssd_g1_b128_fp32_dp_r{i}.json" for i in range(2)
    ]
    assert len(list((cells / "superseded").glob("opencv_*.json"))) == 3
    entry = json.loads(ledger.read_text())["opencv_ssd_g1_b128_amp_dp"]
    assert (
        entry["spread"] is None and entry["cells"] == ["opencv_ssd_g1_b128_amp_dp_r0"] and "contended" in entry["why"]
    )
    # contended again after the rerun: not requeued a second time
    write(cells, busy + single)
    assert respread(cells, 0.05, ledger) == []
