"""`loaderbench plan`: predicted run time from rules, from the same host's records (the same configuration, the
nearest one), an emulated tier's I/O bound, budget refusal and trimming, and the workflow building only the kept
cells. Records are real ones (docs/results) or written by records.make_record."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from loaderbench import cli
from loaderbench.core.cells import cell_ids, cell_spec, configuration
from loaderbench.core.config import validate_config
from loaderbench.core.records import make_record, spec_hash
from loaderbench.core.registry import LOADERS, tierless
from loaderbench.core.util import atomic_write_json
from loaderbench.plan.costmodel import ASSUMED_SAMPLES_PER_S, CELL_OVERHEAD_S, FIRST_STEP_S, JOB_S
from loaderbench.plan.hostrecords import Host, host_of_records, this_host
from loaderbench.plan.predict import make_plan
from tests.conftest import REPO, ok_metrics, record_parts, snakemake, tiny_config, write_config

H200X2 = REPO / "docs/results/2026-11-30-h200x2/engine/bundle/cells"
ENGINE = H200X2.parent.parent / "config.yaml"  # the configuration those records were measured under
CPU2 = Host((), 2, "a 2-core CPU host")


def engine_raw() -> dict:
    """That configuration as it was measured: cuDNN autotuning on and threads pinned, the defaults then."""
    return {**yaml.safe_load(ENGINE.read_text()), "cudnn_benchmark": True, "placement": "auto"}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder as the working directory (the plan reads results/ and resources/ relative to it)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def h200_records(tmp_path) -> Path:
    """The 12 cell records of the 2 x H200 engine run and its tier probe table, copied as its bundle has them. Their
    spec_hash is brought to the config's current spec: the cell spec has gained fields (cudnn_benchmark_limit)
    since they were measured, which changes every hash."""
    out = tmp_path / "bundle/cells"
    shutil.copytree(H200X2, out)
    cfg = validate_config(engine_raw(), base_dir=REPO)
    for f in out.glob("*.json"):
        rec = json.loads(f.read_text())
        rec["spec_hash"] = spec_hash(cell_spec(cfg, rec["cell_id"]))
        f.write_text(json.dumps(rec))
    (out.parent / "tables").mkdir()
    shutil.copy(H200X2.parent / "tables/tier_probe.csv", out.parent / "tables")
    return out


def _record(path: Path) -> dict:
    return json.loads(path.read_text())


def test_every_loader_that_reads_says_what_it_prefetches():
    assert all(record.backlog for name, record in LOADERS.items() if not tierless(name))


def test_rules_predict_overhead_first_step_warmup_and_window(project):
    cfg = validate_config(tiny_config(project), base_dir=project)  # fixed window of 3 steps, 1 worker, prefetch 1
    plan = make_plan(cfg, [project / "results/cells"], host=CPU2)
    step = 4 / ASSUMED_SAMPLES_PER_S["cpu"]  # batch 4 on 1 GPU
    # warmup_steps 1; the backlog (1 worker x prefetch_factor 1) is filled during setup, so the warm-up's second step
    # is the first to wait (costmodel._warmup): 2 steps, the second a whole step
    expected = CELL_OVERHEAD_S["cpu"] + FIRST_STEP_S["cpu"] + 1 * step + 3 * step + JOB_S
    assert {c.basis for c in plan.cells} == {"rules"}
    assert [c.seconds for c in plan.cells] == pytest.approx([expected] * 8)
    assert plan.parts[0].name == "grid" and plan.parts[0].to_run == 8
    assert plan.total_s == pytest.approx(8 * expected + sum(f.seconds for f in plan.fixed))
    names = [f.name for f in plan.fixed]
    assert names[:2] == ["generate dataset (32 images)", "check dataset"]
    assert {"stage disk-a", "stage disk-b"} <= set(names) and any(n.startswith("probe disk-a") for n in names)


def test_an_adaptive_window_of_unknown_rate_is_predicted_at_its_maximum(project):
    cfg = validate_config(tiny_config(project, window={"max_seconds": 8}), base_dir=project)
    cell = make_plan(cfg, [], host=CPU2).cells[0]
    assert "window 8.0 s (at its maximum (rate unknown))" in cell.detail


def test_an_emulated_tier_is_predicted_at_its_device_models_rate(project):
    slow = {"name": "slow-hdd", "access_ms": 20, "bandwidth_mb_s": 100, "concurrency": 1}
    storage = {
        "disk-a": str(project / "tier-a"),
        "hdd": {"kind": "emulated", "path": str(project / "hdd"), "model": slow, "mount": str(project / "mnt")},
    }
    cfg = validate_config(
        tiny_config(
            project,
            storage=storage,
            loaders=["torchvision"],
            precisions=["fp32"],
            batch_sizes=[16],
            window={"max_seconds": 8},
        ),
        base_dir=project,
    )
    plan = make_plan(cfg, [], host=CPU2)
    by_tier = {c.cell.split("_")[1]: c for c in plan.cells}
    files_per_s = 1 / (20e-3 + 110e3 / 100e6)  # no dataset yet: 110 KB per generated file
    step = 16 / files_per_s
    assert files_per_s < ASSUMED_SAMPLES_PER_S["cpu"]
    hdd = by_tier["hdd"]
    assert hdd.basis == "rules" and f"{files_per_s:.0f} samples/s the device model allows" in hdd.detail
    window = max(3.0, 5 * step)  # min_seconds, or 5 steps of one worker's bursts (5 batch means): the rate is known
    assert f"window {window:.1f} s (I/O-bound" in hdd.detail
    # warm-up: the one prefetched batch is ready after setup, the second step waits a whole step
    assert hdd.seconds == pytest.approx(CELL_OVERHEAD_S["cpu"] + FIRST_STEP_S["cpu"] + 1 * step + window + JOB_S)
    assert "at its maximum" in by_tier["disk-a"].detail  # a plain tier's rate is unknown
    probe = next(f for f in plan.fixed if f.name.startswith("probe hdd"))
    assert probe.seconds == pytest.approx(2 * min(20.0, 32 / files_per_s))  # 32 files, readers 1 and 8, one head


def test_same_host_records_of_the_same_configuration_give_its_wall_time(project, h200_records):
    cfg = validate_config(engine_raw(), base_dir=REPO)
    host = host_of_records(h200_records)
    assert host.gpu_models == ("NVIDIA H200", "NVIDIA H200") and host.cpus_usable == 31
    plan = make_plan(cfg, [project / "results/cells"], host=host, host_dirs=[h200_records])
    assert {c.basis for c in plan.cells} == {"record"}
    for c in plan.cells:
        assert c.seconds == pytest.approx(_record(h200_records / f"{c.cell}.json")["wall_s"] + JOB_S)
    probe = next(f for f in plan.fixed if f.name.startswith("probe ram"))  # the bundle's tier_probe.csv
    assert probe.basis == "host records" and probe.seconds == pytest.approx(2000 / 5.793e4 + 2000 / 3.31e4)


def test_records_in_the_results_measured_the_cells_and_cost_nothing_more(project, h200_records):
    cfg = validate_config(engine_raw(), base_dir=REPO)
    plan = make_plan(cfg, [h200_records], host=CPU2)  # the records' spec_hash is the config's cells' own
    assert all(c.measured and c.seconds == 0 for c in plan.cells)
    assert plan.parts[0].measured == 12 and plan.parts[0].to_run == 0
    assert plan.total_s == pytest.approx(sum(f.seconds for f in plan.fixed))


def test_the_nearest_measured_configuration_gives_rate_first_step_and_window(project, h200_records):
    raw = engine_raw()
    raw["batch_sizes"] = [128]
    raw["baseline"] = {**raw["baseline"], "batch_size": 128}
    cfg = validate_config(raw, base_dir=REPO)
    plan = make_plan(cfg, [], host=host_of_records(h200_records), host_dirs=[h200_records])
    cell = next(c for c in plan.cells if c.cell == "synthetic_ram_g1_b128_amp_dp_r0")
    near = _record(h200_records / "synthetic_ram_g1_b256_amp_dp_r0.json")
    m = near["metrics"]
    assert cell.basis == "host records" and "another batch_size" in cell.detail
    overhead = near["wall_s"] - m["time_s"] - m["warmup_s"]
    step = 128 / m["samples_per_s"]
    window = min(15 + step, m["time_s"])  # as the neighbour's adaptive window ran, within this cell's bounds
    assert cell.seconds == pytest.approx(overhead + m["first_step_s"] + 9 * step + window + JOB_S)


def test_a_window_that_never_settled_predicts_a_longer_one_at_its_maximum(project, h200_records):
    """A neighbour whose adaptive window reached its maximum unconverged says nothing about when a longer one would
    settle: that cell is predicted at its own maximum, not at the neighbour's window (engine-3's 30 s dali-cpu)."""
    raw = engine_raw()
    raw["window"]["max_seconds"] = 30
    raw["window"]["min_seconds"] = 1  # another window rule: the records are neighbours, not this configuration
    cfg = validate_config(raw, base_dir=REPO)
    plan = make_plan(cfg, [], host=host_of_records(h200_records), host_dirs=[h200_records])
    cells = {c.cell: c for c in plan.cells}
    unsettled = _record(h200_records / "dali-cpu_ram_g1_b256_amp_ddp_r0.json")
    settled = _record(h200_records / "dali-cpu_ram_g2_b256_amp_ddp_r0.json")
    assert unsettled["metrics"]["window"]["converged"] is False and settled["metrics"]["window"]["converged"]
    assert "window 30." in cells["dali-cpu_ram_g1_b256_amp_ddp_r0"].detail
    window = re.search(r"window ([0-9.]+) s", cells["dali-cpu_ram_g2_b256_amp_ddp_r0"].detail)
    assert float(window.group(1)) == pytest.approx(settled["metrics"]["time_s"], abs=0.06)


def test_a_backlog_filled_during_setup_costs_compute_not_loading(project, h200_records):
    """A worker-fed loader fills its prefetch during setup: its warm-up is those batches at the compute's pace, and
    one step that waits - not backlog + 2 steps at the loader's pace (study-2: torchvision's warm-up was 3-6 s, the
    old model's 62 steps at 131 ms gave 8 s)."""
    from loaderbench.plan.costmodel import PREFILL_SHARE, _warmup

    spec = cell_spec(validate_config(engine_raw(), base_dir=REPO), "torchvision_ram_g1_b256_amp_dp_r0")
    steps, seconds = _warmup(spec, backlog=62, overhead=10.0, first=0.2, step_s=0.131, compute_s=0.036)
    ready = int(PREFILL_SHARE * 10.0 / 0.131)  # 38 of the 62 batches
    assert steps == ready + 1 and seconds == pytest.approx(0.2 + (ready - 1) * 0.036 + 0.131)
    # nothing prefilled (no backlog): every step at the loader's pace, warmup_steps of them
    steps, seconds = _warmup(spec, backlog=0, overhead=10.0, first=0.2, step_s=0.131, compute_s=0.036)
    assert steps == spec.warmup_steps and seconds == pytest.approx(0.2 + (spec.warmup_steps - 1) * 0.131)
    # a slow loader (an HDD: 2.3 s a step) prefills 2 of its 4 batches; warm-up ends at warmup_steps
    steps, seconds = _warmup(spec, backlog=4, overhead=10.0, first=0.2, step_s=2.3, compute_s=0.05)
    assert steps == spec.warmup_steps and seconds == pytest.approx(0.2 + 1 * 0.05 + (steps - 2) * 2.3)


def test_another_hosts_records_are_ignored_unless_planning_for_that_host(project, h200_records, capsys):
    config = project / "engine-b128.yaml"
    raw = engine_raw()
    raw["batch_sizes"] = [128]
    raw["baseline"] = {**raw["baseline"], "batch_size": 128}
    config.write_text(yaml.safe_dump(raw))
    here = this_host()
    if here.matches(_record(next(h200_records.glob("*.json")))):
        pytest.skip("this machine is the host of the H200 records")
    assert cli.main(["plan", "--config", str(config), "--records", str(h200_records), "--cells"]) == 0
    out = capsys.readouterr().out
    assert "records: 12 read, 0 of this host" in out
    assert re.search(r"^grid +12 +0 +12 +0 +\S+ \S+ +12 rules", out, re.MULTILINE)
    assert cli.main(["plan", "--config", str(config), "--host-from", str(h200_records)]) == 0
    out = capsys.readouterr().out
    assert "for 2 x NVIDIA H200, 31 usable CPUs (the host of the records in" in out
    assert "12 host records" in out


def _study(tmp: Path, **over) -> dict:
    """Two parts: `main`, the baseline configuration; `extra`, two loaders x two tiers x 2 repeats."""
    return tiny_config(
        tmp,
        precisions=["fp32"],
        parts=[
            {"name": "main", "note": "the baseline", "loaders": ["torchvision"], "tiers": ["disk-a"]},
            {"name": "extra", "loaders": ["torchvision", "opencv"], "repeats": 2},
        ],
        **over,
    )


def _measure(results: Path, cfg: dict, cid: str, host: dict) -> None:
    """A record of `cid` as the cell runner writes one (ok, wall, phases, the host's provenance)."""
    rec = make_record(
        cell_spec(cfg, cid),
        "ok",
        metrics=ok_metrics(samples_per_s=50.0, time_s=0.3, warmup_s=0.5),
        **{**record_parts(host=host), "wall_s": 6.0, "phases_s": {"wall": 6.0}},
    )
    atomic_write_json(results / "cells" / f"{cid}.json", rec)


def test_over_budget_without_trim_is_refused_with_the_figures(project, capsys):
    cfg = _study(project, budget_minutes=0.5)
    path = write_config(project, cfg)
    assert cli.main(["plan", "--config", str(path), "--json", str(project / "plan.json")]) == 2
    out = capsys.readouterr().out
    assert "REFUSED" in out and "set trim: true" in out
    assert re.search(r"^main +1 +0 +1 +0 ", out, re.MULTILINE) and re.search(r"^extra +7 +0 +7 +0 ", out, re.MULTILINE)
    saved = json.loads((project / "plan.json").read_text())
    assert saved["refused"] and saved["left_out"] == [] and saved["budget_s"] == 30


def test_trim_leaves_out_the_last_parts_last_cells_first_and_keeps_measured_ones(project, capsys):
    raw = _study(project)
    cfg = validate_config(raw, base_dir=project)
    ids = cell_ids(cfg)
    assert ids == [
        "torchvision_disk-a_g1_b4_fp32_dp_r0",
        "torchvision_disk-b_g1_b4_fp32_dp_r0",
        "opencv_disk-a_g1_b4_fp32_dp_r0",
        "opencv_disk-b_g1_b4_fp32_dp_r0",
        "torchvision_disk-a_g1_b4_fp32_dp_r1",
        "torchvision_disk-b_g1_b4_fp32_dp_r1",
        "opencv_disk-a_g1_b4_fp32_dp_r1",
        "opencv_disk-b_g1_b4_fp32_dp_r1",
    ]
    results = project / "results"
    # measured here, on another host (its record costs nothing and stays, whatever its host)
    _measure(results, cfg, "opencv_disk-b_g1_b4_fp32_dp_r1", {"gpu_models": ["X"], "cpus_usable": 64})
    full = make_plan(cfg, [results / "cells"], host=CPU2)
    cell_s = full.cells[0].seconds  # every cell still to run costs the same here (rules, same shape)
    fixed_s = sum(f.seconds for f in full.fixed)
    raw.update(budget_minutes=(fixed_s + 3.5 * cell_s) / 60, trim=True)
    plan = make_plan(validate_config(raw, base_dir=project), [results / "cells"], host=CPU2)
    # leave-out order: extra's repeat 1 backwards (its measured cell stays), then extra's repeat 0 backwards
    assert [c for c in reversed(ids) if c in plan.left_out] == [
        "opencv_disk-a_g1_b4_fp32_dp_r1",
        "torchvision_disk-b_g1_b4_fp32_dp_r1",
        "torchvision_disk-a_g1_b4_fp32_dp_r1",
        "opencv_disk-b_g1_b4_fp32_dp_r0",
    ]
    assert plan.kept == [
        "torchvision_disk-a_g1_b4_fp32_dp_r0",
        "torchvision_disk-b_g1_b4_fp32_dp_r0",
        "opencv_disk-a_g1_b4_fp32_dp_r0",
        "opencv_disk-b_g1_b4_fp32_dp_r1",
    ]
    assert not plan.refused and plan.total_s <= plan.budget_s and plan.total_s == pytest.approx(fixed_s + 3 * cell_s)
    extra = plan.parts[1]
    assert (extra.cells, extra.measured, extra.to_run, len(extra.left_out)) == (7, 1, 2, 4)
    path = write_config(project, raw)
    assert cli.main(["plan", "--config", str(path), "--cells"]) == 0  # this machine: another prediction, same rule
    out = capsys.readouterr().out
    assert "trimmed (trim: true)" in out and "left out of extra: " in out


def test_trim_never_leaves_out_the_baseline_and_refuses_what_cannot_fit(project, capsys):
    path = write_config(project, _study(project, budget_minutes=0.01, trim=True))
    assert cli.main(["plan", "--config", str(path)]) == 2
    out = capsys.readouterr().out
    assert "REFUSED" in out and "even with every cell that may go left out (7" in out
    assert re.search(r"^main +1 +0 +1 +0 ", out, re.MULTILINE)  # the baseline cell stays


@pytest.mark.e2e
def test_the_workflow_builds_only_the_kept_cells_and_refuses_over_budget(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    raw = _study(work)
    monkeypatch.chdir(work)  # the plan as the workflow makes it: in the run's folder, for this machine
    full = make_plan(validate_config(raw, base_dir=work), [work / "results/cells"])
    raw.update(budget_minutes=(sum(f.seconds for f in full.fixed) + 4.5 * full.cells[0].seconds) / 60, trim=True)
    kept = make_plan(validate_config(raw, base_dir=work), [work / "results/cells"]).kept
    assert len(kept) == 4
    dry = snakemake(work, "-n", "--configfile", str(write_config(work, raw)))
    planned = re.findall(r"wildcards: cell=(\S+)", dry.stdout)
    assert sorted(planned) == sorted(kept)
    assert "trimmed (trim: true): 4 cell(s) left out" in dry.stderr
    raw["trim"] = False
    refused = snakemake(work, "-n", "--configfile", str(write_config(work, raw)), check=False)
    assert refused.returncode != 0
    assert "over its budget" in refused.stdout + refused.stderr and "REFUSED" in refused.stdout + refused.stderr


def test_budget_zero_with_trim_closes_a_study_on_its_measured_cells(project, h200_records):
    """A study stopped at its deadline: budget_minutes 0 with trim measures nothing more and keeps what is measured,
    the baseline too when it was not measured - and is not refused."""
    raw = engine_raw()
    raw.update(budget_minutes=0, trim=True)
    cfg = validate_config(raw, base_dir=REPO)
    measured = sorted(p.stem for p in h200_records.glob("*.json"))[:5]
    for p in h200_records.glob("*.json"):
        if p.stem not in measured:
            p.unlink()
    plan = make_plan(cfg, [h200_records], host=CPU2)
    assert sorted(plan.kept) == measured and len(plan.left_out) == 7
    assert not plan.refused and "closing the study" in plan.verdict()


def test_dp_cells_a_kept_process_measures_skip_its_start(project, h200_records):
    """host.reuse_processes: a dp cell after a dp cell (the run order groups them) is predicted without the start-up
    and cold step its records paid; the first dp cell of a repeat (after ddp cells), ddp cells and another repeat of
    a configuration the process measured start anew, at their records' wall time."""
    raw = engine_raw()
    raw["repeats"] = 2
    host = host_of_records(h200_records)
    fresh = make_plan(validate_config(raw, base_dir=REPO), [], host=host, host_dirs=[h200_records])
    kept = make_plan(
        validate_config({**raw, "host": {"reuse_processes": True}}, base_dir=REPO),
        [],
        host=host,
        host_dirs=[h200_records],
    )
    seconds = {c.cell: (f.seconds, c.seconds, c.detail) for f, c in zip(fresh.cells, kept.cells, strict=True)}
    for cell, (was, now, detail) in seconds.items():
        rec = _record(h200_records / f"{configuration(cell)}_r0.json")
        first = cell.startswith("synthetic_ram_g1_") and "_dp_" in cell  # the first dp cell of each repeat
        if "_ddp_" in cell or first:
            assert now == pytest.approx(was) and "kept process" not in detail, cell
        else:  # these records had no cold step yet: a kept process skips their start-up
            shapes = "new shapes" if cell.startswith("synthetic_ram_g2_") else "its shapes ran"  # 2 GPUs: first
            assert f"kept process ({shapes})" in detail, cell
            assert now == pytest.approx(was - rec["metrics"]["startup_s"]), cell
    assert kept.total_s < fresh.total_s
    # off a GPU host (the CPU quickstart) nothing is predicted kept
    cpu = make_plan(validate_config({**raw, "host": {"reuse_processes": True}}, base_dir=REPO), [], host=CPU2)
    assert not any("kept process" in c.detail for c in cpu.cells)


def test_profiled_steps_add_their_time_to_a_cells_prediction(project, h200_records):
    """`profile_steps` runs steps under the profiler after the window: a cell that profiles is predicted longer, by
    its steps at the neighbour's pace (slowed by the profiler) and the reduction of their events."""
    from loaderbench.plan.costmodel import PROFILE_SUMMARY_S, PROFILED_STEP_FACTOR

    raw = engine_raw()
    plain = make_plan(
        validate_config(raw, base_dir=REPO), [], host=host_of_records(h200_records), host_dirs=[h200_records]
    )
    raw["profile_steps"] = 20
    profiled = make_plan(
        validate_config(raw, base_dir=REPO), [], host=host_of_records(h200_records), host_dirs=[h200_records]
    )
    before = {c.cell: c for c in plain.cells}["synthetic_ram_g1_b256_amp_dp_r0"]
    after = {c.cell: c for c in profiled.cells}["synthetic_ram_g1_b256_amp_dp_r0"]
    step_s = 256 / float(re.search(r"([0-9]+) samples/s", after.detail).group(1))
    assert "20 profiled steps" in after.detail and "profiled" not in before.detail
    assert after.seconds - before.seconds == pytest.approx(
        20 * step_s * PROFILED_STEP_FACTOR + PROFILE_SUMMARY_S, abs=0.05
    )
