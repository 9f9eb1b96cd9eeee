"""`loaderbench tune`: a loader's settings searched with real cells on the CPU, against the ceiling of the same run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from loaderbench.core.cells import cell_spec
from loaderbench.core.config import ConfigError, validate_config
from loaderbench.experiments.tune import _finer, config_precision, tune
from loaderbench.experiments.tuneknobs import knobs, not_applicable
from loaderbench.experiments.tunereport import render
from tests.conftest import staged_disk


def test_each_loader_kind_has_its_knobs_with_the_configs_value_first():
    cfg = validate_config({"loaders": ["torchvision", "dali-sc"], "workers": 6, "batch_sizes": [4]})
    tier = cfg["tiers"][0]
    tv = knobs("torchvision", cell_spec(cfg, f"torchvision_{tier}_g1_b4_fp32_dp_r0"), cpus=16)
    assert tv == {"workers": [6, 4, 8, 15], "prefetch_factor": [2, 4], "torchvision_transport": ["float32", "uint8"]}
    dali = knobs("dali-sc", cell_spec(cfg, f"dali-sc_{tier}_g1_b4_fp32_dp_r0"), cpus=16)
    assert set(dali) == {"dali_threads", "dali_prefetch", "dali_hw_decoder_load"}
    with pytest.raises(ConfigError, match="no settings to tune"):
        knobs("synthetic", cell_spec(cfg, f"torchvision_{tier}_g1_b4_fp32_dp_r0"), cpus=16)


def test_a_plugin_declares_what_tune_may_search():
    from loaderbench.core.registry import installed_plugins

    if "threaded-pil" not in installed_plugins():
        pytest.skip("the example plugin is not installed: pip install -e examples/threaded-loader (make does)")
    cfg = validate_config(
        {
            "loaders": ["threaded-pil", "plain"],
            "batch_sizes": [4],
            "plugins": {"plain": "loaderbench.loaders.synthetic:build"},
        }
    )
    tier = cfg["tiers"][0]
    assert knobs("threaded-pil", cell_spec(cfg, f"threaded-pil_{tier}_g1_b4_fp32_dp_r0"), cpus=8) == {
        "workers": [2, 4, 7]
    }
    with pytest.raises(ConfigError, match="no settings to tune"):  # a factory that declares none
        knobs("plain", cell_spec(cfg, f"plain_{tier}_g1_b4_fp32_dp_r0"), cpus=8)


def test_a_count_is_refined_between_the_best_and_its_neighbours():
    assert _finer([4, 8, 15], 8) == [6, 11]
    assert _finer([4, 8, 15], 4) == [6]
    assert _finer(["float32", "uint8"], "uint8") == []


def test_tune_runs_at_the_configs_precision_unless_told():
    def precision(**settings) -> str:
        return config_precision(validate_config({"loaders": ["torchvision"], **settings}))

    assert precision() == "fp32"
    assert precision(precisions=["amp", "fp32"]) == "fp32"  # the baseline's (fp32 unless it says otherwise)
    assert precision(precisions=["amp", "fp32"], baseline={"precision": "amp"}) == "amp"
    assert precision(precisions=["amp"]) == "amp"  # a baseline at a precision the config does not measure


@pytest.fixture(scope="module")
def staged(tmp_path_factory, small_dataset):
    return staged_disk(tmp_path_factory, small_dataset, "tune", workers="auto")


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_the_cli_tunes_at_the_configs_precision_and_an_explicit_one_wins(staged, tmp_path):
    _folder, cfg = staged
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    for extra, expected in (([], "fp32"), (["--precision", "amp"], "amp")):
        out = tmp_path / f"{expected}.json"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "loaderbench",
                "tune",
                "--config",
                str(config),
                "--loader",
                "torchvision",
                "--budget-s",
                "1",
                "--results",
                str(tmp_path / "results"),
                "--out",
                str(tmp_path / expected),
                "--json",
                str(out),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 1, proc.stderr  # a budget too small for a cell: nothing measured
        assert json.loads(out.read_text())["precision"] == expected
        assert f"batch 4 {expected}:" in proc.stdout


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_tune_measures_every_setting_beside_the_ceiling_and_says_what_to_paste(staged, tmp_path):
    folder, cfg = staged
    rep = tune(cfg, "torchvision", "disk", 4, None, 600, folder / "disk.json", tmp_path, cpus=2)
    assert rep["precision"] == "fp32" and all("_fp32_" in p.name for p in tmp_path.glob("*/*.json"))
    assert rep["rounds"] >= 2 and len(rep["ceiling_samples_per_s"]) == rep["rounds"]
    # every value searched was measured, alone or on top of a knob the search moved before it
    tried = {part for k in rep["measured"] for part in k.split(",")}
    assert "start" in rep["measured"]
    assert {"prefetch_factor=2", "prefetch_factor=4", "torchvision_transport=uint8"} <= tried
    # workers: auto is 1 on 2 CPUs, the only count searched there: the start itself, never measured as a candidate
    assert rep["searched"]["workers"] == [1] and not any("workers=" in k for k in rep["measured"])
    assert rep["samples_per_s"] > 0 and 0 < rep["au"] and rep["limit"]
    assert rep["why"]["loader"]["step_device_ms"] > 0 and rep["why"]["step_slowdown"] > 0
    assert "used by the best: step " in render(rep)
    saved = json.loads((tmp_path / "tune.json").read_text())
    assert saved["best"] == rep["best"] and (tmp_path / "ceiling").is_dir()
    if rep["best"]:  # a setting measurably faster: its interval above 1 (measured beside the start when time was left)
        assert rep["gain"] is None or rep["gain"]["low"] > 1.0
        assert validate_config({**yaml.safe_load(rep["snippet"]), "loaders": ["torchvision"]})
        assert "paste into the config" in render(rep)
    else:
        assert "no tried setting was measurably faster" in render(rep)


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_real_tune_trains_the_model_it_is_given_ceiling_and_all(staged, tmp_path):
    folder, cfg = staged
    rep = tune(cfg, "opencv", "disk", 4, None, 50, folder / "disk.json", tmp_path, cpus=2, model="resnet18")
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*/*.json")]
    assert rep["model"] == "resnet18" and rep["cells"] == len(records) >= 2
    assert {r["spec"]["model"] for r in records} == {"resnet18"}
    assert {r["spec"]["loader"] for r in records} == {"opencv", "synthetic"}
    assert all("_resnet18_r" in r["cell_id"] for r in records)
    assert ", model resnet18, batch 4 fp32:" in render(rep)


@pytest.mark.slow
@pytest.mark.usefixtures("warm_cells")
def test_a_budget_too_small_for_one_cell_measures_nothing_and_says_so(staged, tmp_path):
    folder, cfg = staged
    rep = tune(cfg, "opencv", "disk", 4, "fp32", 1, folder / "disk.json", tmp_path, cpus=2)
    assert rep["cells"] == 0 and rep["samples_per_s"] is None
    assert "no setting was measured within the budget" in render(rep)


class _Scripted:
    """Constructed records in place of measured cells (the search's logic alone): a setting's rate, +-1% windows."""

    def __init__(self, rates: dict[str, float]):
        self.rates = rates

    def __call__(self, tuner, loader, settings, r):
        from loaderbench.experiments.tuneknobs import key

        rate = 1000.0 if loader == "synthetic" else self.rates[key(settings)]
        tuner.walls.append(1.0)
        return {
            "status": "ok",
            "wall_s": 1.0,
            "metrics": {
                "samples_per_s": rate * (1 + 0.005 * (-1) ** r),
                "data_wait_fraction": 0.3,
                "window": {"ci95_rel_halfwidth": 0.01},
            },
        }


def test_a_clearly_worse_setting_is_dropped_after_one_round_and_a_better_one_wins_on_its_interval(
    monkeypatch, tmp_path
):
    from loaderbench.experiments import tune as tune_mod

    cfg = validate_config({"loaders": ["torchvision"], "batch_sizes": [4]})
    t = tune_mod.Tuner(cfg, "torchvision", cfg["tiers"][0], 4, "fp32", tmp_path, tmp_path, 600)
    scripted = _Scripted({"start": 100, "workers=2": 150, "workers=3": 50})
    monkeypatch.setattr(tune_mod.Tuner, "measure", lambda self, lo, settings, r: scripted(self, lo, settings, r))
    best = tune_mod._better(t, {}, [{"workers": 2}, {"workers": 3}])
    assert best == {"workers": 2} and t.rounds == 2
    assert sorted(t.runs["workers=3"]) == [0] and sorted(t.runs["workers=2"]) == [0, 1]  # dropped after round 0
    assert t.against({"workers": 2}, {}).low > 1.0


def test_a_setting_inside_the_noise_does_not_move_the_knob(monkeypatch, tmp_path):
    from loaderbench.experiments import tune as tune_mod

    cfg = validate_config({"loaders": ["torchvision"], "batch_sizes": [4]})
    t = tune_mod.Tuner(cfg, "torchvision", cfg["tiers"][0], 4, "fp32", tmp_path, tmp_path, 600)
    scripted = _Scripted({"start": 100, "workers=2": 100.5})
    monkeypatch.setattr(tune_mod.Tuner, "measure", lambda self, lo, settings, r: scripted(self, lo, settings, r))
    assert tune_mod._better(t, {}, [{"workers": 2}]) == {}


def test_a_best_found_over_two_knobs_is_measured_beside_the_start_for_its_gain(monkeypatch, tmp_path):
    """workers=4 wins its knob against the start, then prefetch_factor=4 wins on top of it in rounds without the
    start: one more round measures the two side by side, so the report's gain is over the config's own settings."""
    import contextlib

    from loaderbench.experiments import tune as tune_mod

    def rate(settings: dict) -> float:
        return (
            100.0
            * (1.5 if settings.get("workers") == 4 else 1.0)
            * (1.2 if settings.get("prefetch_factor") == 4 else 1.0)
        )

    def measure(self, loader, settings, r):
        self.walls.append(1.0)
        value = 1000.0 if loader == "synthetic" else rate(settings)
        return {
            "status": "ok",
            "wall_s": 1.0,
            "metrics": {
                "samples_per_s": value * (1 + 0.005 * (-1) ** r),
                "data_wait_fraction": 0.3,
                "window": {"ci95_rel_halfwidth": 0.01},
            },
        }

    monkeypatch.setattr(tune_mod.Tuner, "measure", measure)
    monkeypatch.setattr(tune_mod.warmclient, "serving", contextlib.nullcontext)
    cfg = validate_config({"loaders": ["torchvision"], "batch_sizes": [4]})
    rep = tune_mod.tune(cfg, "torchvision", cfg["tiers"][0], 4, "fp32", 600, tmp_path, tmp_path, cpus=8)
    assert rep["best"] == {"workers": 4, "prefetch_factor": 4}
    assert rep["gain"]["value"] == pytest.approx(1.8, rel=0.02) and rep["gain"]["low"] > 1.0
    assert "1.80x" in render(rep)


def test_the_knobs_that_measured_gains_come_first_and_the_steps_need_a_gpu():
    cfg = validate_config({"loaders": ["dali-sc", "dali-cpu", "torchvision"], "batch_sizes": [4]})
    tier = cfg["tiers"][0]

    def spec(loader):
        return cell_spec(cfg, f"{loader}_{tier}_g1_b4_fp32_dp_r0")

    assert list(knobs("dali-sc", spec("dali-sc"), cpus=16, cuda=True)) == [
        "dali_hw_decoder_load",
        "step_stream_priority",
        "dali_threads",
        "dali_prefetch",
        "compile",
    ]
    gpu = knobs("dali-cpu", spec("dali-cpu"), cpus=16, cuda=True)
    assert list(gpu) == ["step_stream_priority", "dali_threads", "dali_prefetch", "compile"]
    assert gpu["step_stream_priority"] == ["default", "high"] and gpu["compile"] == [False, "reduce-overhead"]
    assert list(knobs("torchvision", spec("torchvision"), cpus=16, cuda=True))[-1] == "compile"
    # on a host without a CUDA device the step's knobs are left out, each with why
    assert list(knobs("dali-cpu", spec("dali-cpu"), cpus=16)) == ["dali_threads", "dali_prefetch"]
    left = not_applicable("dali-cpu", spec("dali-cpu"), 16, cuda=False)
    assert set(left) == {"step_stream_priority", "compile"} and all("no CUDA device" in v for v in left.values())
    assert not_applicable("dali-cpu", spec("dali-cpu"), 16, cuda=True) == {}


def _scripted_search(monkeypatch, tmp_path, loader: str, budget_s: float, wait: float, cuda: bool) -> dict:
    """`tune` over constructed records, on a clock each cell moves by 10 s: the hardware decoder's share 1.0 makes
    the loader 1.1x, the step's high-priority stream 1.15x (its ceiling 1.05x), nothing else moves it; every cell waits
    `wait` of its time for data."""
    import contextlib
    import types

    from loaderbench.experiments import tune as tune_mod

    clock = [0.0]

    def measure(self, lo, settings, r):
        clock[0] += 10.0
        self.walls.append(10.0)
        high = settings.get("step_stream_priority") == "high"
        if lo == "synthetic":
            rate = 1000.0 * (1.05 if high else 1.0)
        else:
            rate = 100.0 * (1.1 if settings.get("dali_hw_decoder_load") == 1.0 else 1.0) * (1.15 if high else 1.0)
        return {
            "status": "ok",
            "wall_s": 10.0,
            "metrics": {
                "samples_per_s": rate * (1 + 0.005 * (-1) ** r),
                "data_wait_fraction": wait,
                "window": {"ci95_rel_halfwidth": 0.01},
            },
        }

    monkeypatch.setattr(tune_mod.Tuner, "measure", measure)
    monkeypatch.setattr(tune_mod, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(tune_mod.warmclient, "serving", contextlib.nullcontext)
    cfg = validate_config({"loaders": [loader], "batch_sizes": [4]})
    return tune_mod.tune(cfg, loader, cfg["tiers"][0], 4, "amp", budget_s, tmp_path, tmp_path, cpus=8, cuda=cuda)


def test_a_loader_whose_batches_are_ready_gets_the_step_knobs_first_and_its_feeding_knobs_skipped(
    monkeypatch, tmp_path
):
    rep = _scripted_search(monkeypatch, tmp_path, "dali-sc", 6000, wait=0.03, cuda=True)
    assert rep["order"] == ["dali_hw_decoder_load", "step_stream_priority", "compile"]
    assert set(rep["moved_last"]) == set(rep["skipped"]) == {"dali_threads", "dali_prefetch"}
    assert "batches ready: the step waited 3% of its time for data" in rep["skipped"]["dali_threads"]
    assert not any("dali_threads=" in k or "dali_prefetch=" in k for k in rep["measured"])
    assert rep["not_reached"] == [] and rep["not_applicable"] == {}
    assert rep["best"] == {"dali_hw_decoder_load": 1.0, "step_stream_priority": "high"}
    assert rep["gain"]["value"] == pytest.approx(1.1 * 1.15, rel=0.02) and rep["gain"]["low"] > 1.0
    # the ceiling beside each candidate trains its step: the best's AU is against the high-priority step's ceiling
    assert set(rep["ceilings"]) == {
        "start",
        "step_stream_priority=high",
        "compile=reduce-overhead,step_stream_priority=high",
    }
    assert rep["au"] == pytest.approx(100 * 1.1 * 1.15 / 1050, rel=0.02)
    assert rep["fix"]["what"] == "dali-sc with dali.hw_decoder_load: 1.0, step_stream_priority: high"
    assert rep["fix"]["text"] == f"{rep['fix']['what']}: {rep['gain']['value']:.2f}x [{rep['gain']['low']:.2f}, " + (
        f"{rep['gain']['high']:.2f}] the config's settings"
    )
    text = render(rep)
    assert "best fix: dali-sc with dali.hw_decoder_load: 1.0, step_stream_priority: high" in text
    assert "skipped: dali_prefetch: batches ready" in text and "every knob reached within the budget" in text
    assert "step_stream_priority: high" in rep["snippet"]


def test_a_report_lists_the_knobs_its_budget_did_not_reach(monkeypatch, tmp_path):
    """14 cells of 10 s fit: the decoder's share and the stream priority, two rounds each; the rest is listed as not reached,
    and a best not measured beside the start in one round names no fix."""
    rep = _scripted_search(monkeypatch, tmp_path, "dali-sc", 145, wait=0.03, cuda=True)
    assert rep["cells"] == 14 and rep["order"] == ["dali_hw_decoder_load", "step_stream_priority"]
    assert rep["not_reached"] == ["dali_threads", "dali_prefetch", "compile"]
    assert rep["best"] == {"dali_hw_decoder_load": 1.0, "step_stream_priority": "high"}
    assert rep["gain"] is None and rep["fix"] is None
    assert "not reached within the budget: dali_threads, dali_prefetch, compile" in render(rep)


def test_a_loader_that_waits_for_data_gets_its_feeding_knobs_in_order_and_no_gpu_knob_on_a_cpu_host(
    monkeypatch, tmp_path
):
    rep = _scripted_search(monkeypatch, tmp_path, "dali-cpu", 6000, wait=0.3, cuda=False)
    assert rep["order"] == ["dali_threads", "dali_prefetch"] and rep["moved_last"] == rep["skipped"] == {}
    assert set(rep["not_applicable"]) == {"step_stream_priority", "compile"} and rep["not_reached"] == []
    assert not any("step_stream_priority" in k or "compile" in k for k in [*rep["measured"], *rep["ceilings"]])
    assert rep["best"] == {} and rep["fix"] is None
    assert "not applicable here: compile: a captured step" in render(rep)


def _used(compute_ms: float, gpu: float | None, jpg: float | None, cores: float) -> dict:
    gpus = [] if gpu is None else [{"util_pct": {"mean": gpu}, "jpg_util_pct": None if jpg is None else {"mean": jpg}}]
    return {
        "status": "ok",
        "metrics": {"compute_ms": {"mean": compute_ms}},
        "telemetry": {"gpus": gpus, "cpu_cores_busy": cores},
    }


def test_the_report_says_how_much_longer_the_step_takes_beside_the_loader():
    """Constructed records (no GPU here): two processes of the best setting and two of the ceiling."""
    from loaderbench.experiments.tunereport import _why_lines, why

    w = why([_used(33.0, 78, 41, 4.5), _used(35.0, 80, 45, 4.9)], [_used(27.0, 98, None, 1.1), _used(29.0, 99, 0, 1.2)])
    assert w["loader"] == {
        "step_device_ms": 34.0,
        "gpu_busy_pct": 79,
        "jpeg_decoders_busy_pct": 43,
        "cpu_cores_busy": 4.7,
    }
    assert w["ceiling"]["jpeg_decoders_busy_pct"] == 0 and w["step_slowdown"] == pytest.approx(34.0 / 28.0)
    text = "\n".join(_why_lines(w))
    assert "step 34.0 ms on the device, GPU busy 79%, JPEG decoders 43%, 4.7 cores busy" in text
    assert "the step takes 1.21x its time alone on the device beside this loader" in text
    # on a CPU host: no GPU figures, no slowdown without the ceiling's step time
    cpu = why([_used(300.0, None, None, 2.0)], [])
    assert cpu["loader"]["gpu_busy_pct"] is None and cpu["step_slowdown"] is None
    assert _why_lines(cpu)[1] == "used by the ceiling: not measured"


def test_a_step_at_its_ceiling_is_the_limit_even_while_the_host_waits_for_data():
    """A captured step (dali-cpu on an H100: AU 0.99 with the host waiting 59% of a step) is not loader-bound."""
    from loaderbench.experiments.tunereport import limit

    assert limit(0.59, 0.99).startswith("the training step: it runs at AU 0.99; the host waits 59%")
    assert limit(0.59, 0.80) == limit(0.3, None) == "the loader: the step still waits for data"
    assert limit(0.02, 0.5) == "the training step: batches are ready" and limit(None, 0.9) is None


def test_a_ceiling_that_moved_between_rounds_and_a_step_faster_beside_its_loader_are_flagged():
    """The ceiling's rate a round at 4 and 26 samples/s, and a step 0.78x its time alone beside the loader: neither
    passes without a word; a steady ceiling and a step slower beside the loader say nothing more."""
    from loaderbench.experiments.tunereport import _why_lines, ceiling_warning

    assert "moved 6.50x between rounds" in ceiling_warning([4.0, 26.0])
    assert ceiling_warning([100.0, 102.0]) is None and ceiling_warning([100.0]) is None
    usage = {"step_device_ms": None, "gpu_busy_pct": None, "jpeg_decoders_busy_pct": None, "cpu_cores_busy": None}
    fast = _why_lines({"loader": usage, "ceiling": usage, "step_slowdown": 0.78})
    assert fast[-2].endswith("0.78x its time alone on the device beside this loader")
    assert "faster beside the loader than alone" in fast[-1]
    assert len(_why_lines({"loader": usage, "ceiling": usage, "step_slowdown": 1.14})) == 3
