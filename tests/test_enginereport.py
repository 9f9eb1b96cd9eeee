"""`loaderbench engine-report` on constructed and real records: overhead, convergence, dp over ddp, the spread of
repeats read against the host's steal, and a sweep's variants kept apart."""

from __future__ import annotations

import pytest


def _record(cid, sps, overhead, window_s=5.0, converged=True, status="ok"):
    """A cell record with its phases and an adaptive window that converged or did not."""
    return {
        "cell_id": cid,
        "status": status,
        "phases_s": {
            "wall": overhead + window_s,
            "overhead": overhead,
            "startup": 2.0,
            "setup": 1.0,
            "warmup": overhead - 3.0,
            "window": window_s,
        },
        "metrics": {
            "samples_per_s": sps,
            "time_s": window_s,
            "warnings": [] if converged else [{"code": "not_converged", "text": "x"}],
            "window": {
                "mode": "adaptive",
                "ci95_rel_halfwidth": 0.01 if converged else 0.04,
                "converged": converged,
            },
        },
    }


def test_engine_report_gives_overhead_convergence_dp_over_ddp_and_spread_from_records():
    from loaderbench.report.enginereport import render, report

    records = [
        _record("synthetic_ram_g2_b256_amp_dp_r0", 12000.0, 8.0),
        _record("synthetic_ram_g2_b256_amp_ddp_r0", 13500.0, 10.0),
        _record("dali-cpu_ram_g1_b256_amp_ddp_r0", 6000.0, 6.0),
        _record("dali-cpu_ram_g1_b256_amp_ddp_r1", 6120.0, 7.0),
        _record("dali-cpu_ram_g1_b256_amp_ddp_r2", 5940.0, 9.0, converged=False),
        {"cell_id": "torchvision_ram_g2_b256_amp_dp_r0", "status": "failed", "reason": "x"},
    ]
    for r in records[:4]:
        r["process_start"] = [{"rank": 0, "pid": 1, "warm": True, "how": "forked", "reused": 0}]
    records[1]["process_start"][0]["reused"] = 2  # kept from 2 cells before (warmstart's reuse)
    for r, cold in zip(records[:5], (3.0, 4.0, 8.0, 6.0, None), strict=True):
        r["metrics"]["cold_step_s"] = cold
    records[4]["process_start"] = [{"rank": 0, "pid": 2, "warm": False, "how": "no warm-start server"}]
    rep = report(records)
    assert rep["process_starts"] == {"warm": 4, "reused": 1, "plain": {"no warm-start server": 1}}
    assert rep["cold_step_median_s"] == {"dali-cpu": 7.0, "synthetic": 3.5}
    assert rep["ok"] == 5 and rep["status"] == {"ok": 5, "failed": 1}
    assert rep["overhead_s"] == {"median": 8.0, "min": 6.0, "max": 10.0}
    assert rep["adaptive"] == {"cells": 5, "converged": 4, "ci95_median": 0.01}
    (dp,) = rep["dp_over_ddp"]
    assert dp["config"] == "synthetic_ram_2_256_amp" and dp["ratio"] == pytest.approx(12000 / 13500)
    (rp,) = rep["repeats"]
    assert rp["n"] == 3 and rp["median"] == 6000.0 and rp["spread"] == pytest.approx(180 / 6000)
    text = render(rep)
    assert "median 8.0 s" in text and "= 0.889" in text and "spread 3.00%" in text and "not_converged" in text
    assert "4 forked warm (1 of them kept from a cell before), 1 started plainly" in text
    assert "1 plain: no warm-start server" in text
    assert "cold step (in setup), median by loader: dali-cpu 7.0 s, synthetic 3.5 s" in text
    assert rep["foreign_cpu"] is None and "steal ?, ?, ? cores" in text  # records without contention
    assert "whole bursts" not in text and "profile " not in text
    # worker-fed windows cut to whole bursts, and a cell profiled after its window (stepprofile)
    records[2]["metrics"]["window"]["whole_bursts"] = {"steps": 62, "cut_head_steps": 31, "cut_tail_steps": 5}
    records[3]["metrics"]["window"]["whole_bursts"] = {"steps": 93, "cut_head_steps": 0, "cut_tail_steps": 0}
    records[3]["metrics"]["profile"] = [
        {
            "steps": 20,
            "gpus": {
                "0": {
                    "span_ms": 43.0,
                    "busy_ms": 40.0,
                    "main_idle_ms": 9.5,
                    "overlap_ms": 4.0,
                    "streams": {
                        "7": {"role": "main", "kernel_ms": 33.0, "copy_ms": 0.5},
                        "9": {"role": "other", "kernel_ms": 6.0, "copy_ms": 2.0},
                    },
                }
            },
        }
    ]
    text = render(report(records))
    assert "whole bursts: 1 of 2 worker-fed windows cut (steps cut at the start [31], at the end [5])" in text
    (line,) = [x for x in text.splitlines() if x.startswith("profile ")]
    assert "dali-cpu_ram_g1_b256_amp_ddp_r1" in line and line.endswith(
        "per step 43.0 ms on GPU, busy 40.0; training stream kernels 33.0, idle 9.5; other streams' kernels 6.0 (4.0 "
        "under the training stream's); copies 2.5"
    )


def test_engine_report_reads_repeats_against_the_hosts_steal():
    """The foreign CPU of each window, split into steal, interrupts and processes where the record has the split:
    the repeats' spread is printed beside each repeat's steal (study-3: 1.8-2.0 cores of hypervisor steal)."""
    from loaderbench.report.enginereport import render, report

    def rec(cid, sps, foreign, split=None, contended=False):
        c = {"foreign_cpu_cores": foreign, "contended": contended}
        if split:
            c["foreign_breakdown"] = {
                "irq": split[0],
                "steal": split[1],
                "processes": [{"pid": 9, "name": "hog", "cores": split[2]}] if split[2] else [],
            }
        return {
            "cell_id": cid,
            "status": "ok",
            "contention": c,
            "phases_s": {"wall": 10.0, "overhead": 5.0, "window": 5.0},
            "metrics": {"samples_per_s": sps, "time_s": 5.0},
        }

    rep = report(
        [
            rec("dali-cpu_ram_g1_b256_amp_dp_r0", 4400.0, 2.1, (0.1, 2.0, 0.0), True),
            rec("dali-cpu_ram_g1_b256_amp_dp_r1", 5500.0, 0.2, (0.05, 0.15, 0.0)),
            rec("dali-cpu_ram_g1_b256_amp_dp_r2", 5700.0, 0.3),
            rec("synthetic_ram_g1_b256_amp_dp_r0", 6700.0, 1.0, (0.1, 0.1, 0.8), True),
        ]
    )
    (rp,) = rep["repeats"]
    assert rp["steal_cores"] == [2.0, 0.15, None] and rp["samples_per_s"] == [4400.0, 5500.0, 5700.0]
    f = rep["foreign_cpu"]
    assert f["cells"] == 4 and f["contended"] == 2 and f["split_cells"] == 3
    assert f["median_cores"] == pytest.approx(0.65)
    assert f["median_split_cores"] == pytest.approx({"irq": 0.1, "steal": 0.15, "processes": 0.0})
    text = render(rep)
    assert "(4400, 5500, 5700; steal 2.00, 0.15, ? cores)" in text
    assert "median 0.65 cores over 4 cells, 2 contended; in the 3 cells that split it, median steal 0.15" in text


def test_engine_report_reads_a_sweeps_folders_and_keeps_its_variants_apart(tmp_path):
    """A sweep keeps one folder per variant and a summary list beside them; a fused optimizer is another
    configuration, never pooled into the plain one's repeats, and so is any other setting that differs between
    records of one cell (engine-3's torchvision at 2 and 4 batches ahead were pooled as repeats, 20.6% apart). A
    setting only some records have (written before it existed) with one value sets none apart."""
    import json as _json

    from loaderbench.report.enginereport import load, report

    def rec(variant, r, sps, fused, loader="synthetic", **spec):
        d = tmp_path / variant
        d.mkdir(exist_ok=True)
        cid = f"{loader}_ram_g1_b256_amp_dp_r{r}"
        spec = {"seed": r, "repeat": r, **spec, **({"optimizer_fused": True} if fused else {})}
        (d / f"{cid}.json").write_text(
            _json.dumps(
                {
                    "cell_id": cid,
                    "status": "ok",
                    "spec": spec,
                    "metrics": {"samples_per_s": sps, "time_s": 3.0},
                    "phases_s": {"wall": 8.0, "overhead": 5.0},
                }
            )
        )

    for r, (a, b) in enumerate([(6300, 8750), (6800, 8650)]):
        rec("base", r, a, False)
        rec("fused", r, b, True)
        rec("base", r, a - 1000, False, "dali-cpu", dali_threads="auto", workers=4)
        rec("t8", r, a - 500, False, "dali-cpu", dali_threads=8, workers=4)
    rec("base", 2, 5400, False, "dali-cpu", workers=4)  # an older record: no dali_threads
    (tmp_path / "sweep.json").write_text("[]")
    (tmp_path / "base" / "superseded").mkdir()
    (tmp_path / "base" / "superseded" / "x.json").write_text(_json.dumps({"cell_id": "x", "status": "ok"}))
    records = load(tmp_path)
    assert len(records) == 9
    got = {r["config"]: sorted(r["samples_per_s"]) for r in report(records)["repeats"]}
    assert got == {
        "synthetic_ram_1_256_amp_dp": [6300, 6800],
        "synthetic[fused]_ram_1_256_amp_dp": [8650, 8750],
        "dali-cpu[dali_threads=auto]_ram_1_256_amp_dp": [5300, 5800],
        "dali-cpu[dali_threads=8]_ram_1_256_amp_dp": [5800, 6300],
    }
    # the t8 records gone, the older record and those with dali_threads=auto are one configuration's repeats
    for p in (tmp_path / "t8").iterdir():
        p.unlink()
    got = {r["config"]: sorted(r["samples_per_s"]) for r in report(load(tmp_path))["repeats"]}
    assert got["dali-cpu_ram_1_256_amp_dp"] == [5300, 5400, 5800]
