"""`loaderbench watch`: real training scripts, written here, run under the watch in real processes.

The scripts sleep known times, so each expected data-wait share follows from them: with num_workers=0 a batch of B
samples costs B x the Dataset's sleep inside `__next__` and the step sleeps on its own, share = load / (load + step);
with W workers each making a whole batch, a batch arrives every B x sleep / W, and the step's sleep is hidden in it,
share = 1 - step x W / (B x sleep).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import loaderbench
from loaderbench.core.records import WATCH, validate_record
from loaderbench.engine.watch.launch import EXIT_STOPPED
from loaderbench.engine.watch.probe import batch_size
from loaderbench.engine.watch.record import script_name
from loaderbench.report.watchtext import PREFIX

SRC = Path(loaderbench.__file__).resolve().parents[1]

SCRIPT = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_S, STEP_S, WORKERS, BATCHES, BATCH = {sample_s}, {step_s}, {workers}, {batches}, {batch}

class Sleepy(Dataset):
    def __len__(self):
        return BATCHES * BATCH
    def __getitem__(self, i):
        time.sleep(SAMPLE_S)
        return torch.zeros(3), i

loader = DataLoader(Sleepy(), batch_size=BATCH, num_workers=WORKERS)
for x, y in loader:
    time.sleep(STEP_S)
print("trained", file=sys.stdout)
"""


def env() -> dict:
    """This checkout's loaderbench first on the path of `python -m loaderbench`."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [e.get("PYTHONPATH")])])
    return e


def watch(tmp: Path, command: list[str], *options: str, cwd: Path | None = None) -> tuple[subprocess.Popen, dict]:
    """`loaderbench watch` of `command`: its completed process (stdout, stderr captured) and its record."""
    out = tmp / "watch-out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "loaderbench", "watch", "--out", str(out), *options, "--", *command]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env(), cwd=cwd or tmp, timeout=120)
    records = [p for p in out.glob("*.json") if not p.name.endswith(".trace.json")]
    assert len(records) == 1, done.stderr
    return done, json.loads(records[0].read_text())


def script(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(textwrap.dedent(text))
    return path


def test_batch_size_is_read_through_containers():
    class T:
        shape = (7, 3)

    assert batch_size([{"images": T(), "labels": T()}]) == 7
    assert batch_size(({"x": [T()]}, 1)) == 7
    assert batch_size([1, "a"]) is None


def test_script_names_fit_the_cell_id_grammar():
    assert script_name(["python", "My_Train.py", "--lr", "1"]) == "script-my-train"
    assert script_name(["python", "-m", "pkg.train"]) == "script-pkg-train"
    assert script_name(["torchrun", "--nproc-per-node=2", "ddp.py"]) == "script-ddp"


@pytest.mark.slow
@pytest.mark.parametrize(("sample_s", "step_s"), [(0.005, 0.020), (0.002, 0.024)])
def test_wait_share_matches_the_known_delays(tmp_path, sample_s, step_s):
    batch = 4
    path = script(tmp_path, "train.py", SCRIPT.format(sample_s=sample_s, step_s=step_s, workers=0, batches=60, batch=4))
    done, record = watch(tmp_path, [sys.executable, str(path)])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained\n"
    validate_record(record)
    assert record["kind"] == WATCH and record["status"] == "ok"
    assert record["cell_id"] == "script-train_watch_g1_b4_fp32_dp_unknown_r0"
    m = record["metrics"]
    expected = batch * sample_s / (batch * sample_s + step_s)
    assert abs(m["data_wait_fraction"] - expected) < 0.05, (m["data_wait_fraction"], expected)
    assert m["global_batch"] == batch and m["workers"] == 0
    assert m["warmup_steps"] == 6  # 10% of 60 batches
    assert m["window"]["ci95_rel_halfwidth"] is not None and m["data_wait_fraction_ci95"] is not None
    assert f"{PREFIX}  data-bound" in done.stderr
    trace = json.loads((tmp_path / "watch-out" / f"{record['cell_id']}.trace.json").read_text())
    waits = [e for e in trace["traceEvents"] if e.get("name") == "wait for the batch"]
    assert len(waits) == 59  # every batch but the last, whose step has no end


TRAIN_AND_EVALUATE = """
import time, torch
from torch.utils.data import DataLoader, Dataset

class Sleepy(Dataset):
    def __init__(self, n, sample_s):
        self.n, self.sample_s = n, sample_s
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(self.sample_s)
        return torch.zeros(3), i

train = DataLoader(Sleepy(120, 0.002), batch_size=4)  # 8 ms a batch
val = DataLoader(Sleepy(40, 0.02), batch_size=8)  # 160 ms a batch: five of them, 0.8 s an evaluation
for epoch in range(2):
    for x, y in train:
        time.sleep(0.008)  # the step: a period of 16 ms, half of it waiting
    for x, y in val:
        pass
"""


@pytest.mark.slow
def test_the_window_follows_the_training_loader_and_leaves_the_evaluation_out(tmp_path):
    """Two epochs of 30 training batches, each followed by an evaluation of 5 slow batches: the window is the
    training batches' steps (the step across the first evaluation left out), so the rate is a training step's and
    the evaluation's 0.8 s count nowhere."""
    path = script(tmp_path, "train_eval.py", TRAIN_AND_EVALUATE)
    done, record = watch(tmp_path, [sys.executable, str(path)])
    assert done.returncode == 0, done.stderr
    m = record["metrics"]
    assert m["window"]["other_batches"] == 10 and m["global_batch"] == 4
    assert m["steps"] == 60 - 6 - 1  # after 10% warm-up, less the step the first evaluation interrupts
    period = m["time_s"] / m["steps"]
    assert 0.014 < period < 0.030, period  # a training step (16 ms), not diluted by 2 x 0.8 s of evaluation
    assert abs(m["data_wait_fraction"] - 0.5) < 0.1, m["data_wait_fraction"]
    assert "left out: 10 batch(es) of other iterables" in done.stderr


@pytest.mark.slow
def test_workers_hide_the_step_in_the_loaders_time(tmp_path):
    """2 workers, 4 samples of 20 ms a batch: a batch every 40 ms; the 10 ms step leaves 1 - 10 x 2 / 80 = 75%."""
    path = script(tmp_path, "train.py", SCRIPT.format(sample_s=0.02, step_s=0.01, workers=2, batches=60, batch=4))
    done, record = watch(tmp_path, [sys.executable, str(path)])
    assert done.returncode == 0, done.stderr
    m = record["metrics"]
    assert m["workers"] == 2
    assert abs(m["data_wait_fraction"] - 0.75) < 0.08, m["data_wait_fraction"]
    assert abs(m["samples_per_s"] - 100) < 15, m["samples_per_s"]  # 4 samples every 40 ms


@pytest.mark.slow
def test_a_command_without_a_loader_is_said_so_and_its_status_passes(tmp_path):
    path = script(tmp_path, "plain.py", "print('no loader here')\n")
    done, record = watch(tmp_path, [sys.executable, str(path)])
    assert done.returncode == 0 and done.stdout == "no loader here\n"
    assert record["status"] == "skipped" and "DataLoader" in record["reason"]
    assert "nothing measured" in done.stderr


def own_lines(stderr: str) -> str:
    """The command's stderr out of the watch's: its first line (`[watch] out: ...`) and its closing block (a newline
    of its own, then lines starting with PREFIX) taken away."""
    first, _, rest = stderr.partition("\n")
    assert first.startswith(PREFIX)
    return rest[: rest.index("\n" + PREFIX + "script-")]


@pytest.mark.slow
def test_a_crash_passes_its_status_and_output_through_unchanged(tmp_path):
    path = script(
        tmp_path,
        "crash.py",
        SCRIPT.format(sample_s=0.001, step_s=0.001, workers=0, batches=12, batch=2)
        + "sys.stderr.write('partial line, no newline'); sys.stdout.write('out\\n')\nraise SystemExit(3)\n",
    )
    plain = subprocess.run(
        [sys.executable, str(path)], check=False, capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    done, record = watch(tmp_path, [sys.executable, str(path)])
    assert plain.returncode == done.returncode == 3
    assert done.stdout == plain.stdout == "trained\nout\n"
    assert own_lines(done.stderr) == plain.stderr, done.stderr
    assert record["watch"]["exit_status"] == 3 and record["status"] == "ok"


@pytest.mark.slow
def test_python_dash_m_is_watched(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(SCRIPT.format(sample_s=0.001, step_s=0.002, workers=0, batches=20, batch=2))
    done, record = watch(tmp_path, [sys.executable, "-m", "pkg.train"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert record["cell_id"].startswith("script-pkg-train_watch_g1_b2_")
    assert record["status"] == "ok"


DDP = """
import os, time, torch, torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset, DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
data = TensorDataset(torch.zeros(160, 3), torch.zeros(160))
loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
for x, y in loader:
    time.sleep(0.01 if rank == 0 else 0.02)  # rank 1's own work is slower; the gradients' allreduce paces rank 0
    model(x).sum().backward()
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="no torchrun")
def test_torchrun_reports_every_rank_and_names_the_slowest(tmp_path):
    path = script(tmp_path, "ddp.py", DDP)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    cmd = [torchrun, "--standalone", "--nproc-per-node=2", str(path)]
    done, record = watch(tmp_path, cmd)
    assert done.returncode == 0, done.stderr
    m = record["metrics"]
    assert record["cell_id"] == "script-ddp_watch_g2_b4_fp32_ddp_unknown_r0"
    assert sorted(r["rank"] for r in m["parallel"]["per_rank"]) == [0, 1]
    assert m["parallel"]["mode"] == "ddp" and m["global_batch"] == 8
    assert "slowest: rank" in done.stderr


DALI_SCRIPT = """
import sys
from nvidia.dali import fn, pipeline_def
from nvidia.dali.plugin.pytorch import DALIGenericIterator

@pipeline_def(batch_size=4, num_threads=1, device_id=None)
def images(root):
    jpegs, labels = fn.readers.file(file_root=root, name="Reader")
    return fn.resize(fn.decoders.image(jpegs, device="cpu"), size=(16, 16)), labels

pipe = images(sys.argv[1])
pipe.build()
for epoch in range(4):
    for batch in DALIGenericIterator([pipe], ["images", "labels"], reader_name="Reader"):
        pass
"""


@pytest.mark.slow
def test_the_dali_iterator_is_watched_on_the_cpu(tmp_path, small_dataset):
    """DALI in its CPU-only mode (device_id=None), as the loaders' CPU tests use it."""
    path = script(tmp_path, "dali_train.py", DALI_SCRIPT)
    done, record = watch(tmp_path, [sys.executable, str(path), str(small_dataset)])
    assert done.returncode == 0, done.stderr
    assert record["status"] == "ok"
    assert record["metrics"]["global_batch"] == 4
    assert record["metrics"]["parallel"]["per_rank"][0]["iterator"] == "dali"
    assert record["metrics"]["steps"] >= 5


@pytest.mark.slow
def test_seconds_stops_a_hanging_script_even_one_that_ignores_sigterm(tmp_path):
    path = script(
        tmp_path,
        "hang.py",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        + SCRIPT.format(sample_s=0.001, step_s=0.002, workers=0, batches=20, batch=2)
        + "time.sleep(600)\n",
    )
    t = time.monotonic()
    done, record = watch(tmp_path, [sys.executable, str(path)], "--seconds", "6", "--grace", "1")
    assert time.monotonic() - t < 30
    assert done.returncode == EXIT_STOPPED
    assert record["watch"]["stopped_by_watch"] is True and record["status"] == "ok"
    assert "stopped the command after --seconds" in done.stderr


MOBILENET = """
import time, torch, torchvision
from torch.utils.data import DataLoader, Dataset

class Sleepy(Dataset):
    def __len__(self):
        return 160
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.zeros(3), i

model = torchvision.models.mobilenet_v2(num_classes=3)  # built, never run: the step below only sleeps
for x, y in DataLoader(Sleepy(), batch_size=4):
    time.sleep(0.016)  # 4 samples in about 20 ms: about 200 samples/s
"""


@pytest.mark.slow
def test_records_rank_this_hosts_grid_against_the_script(tmp_path):
    """The grid's records are made here through make_record at stated rates (a measured grid takes minutes): two
    configurations at the script's model, batch and precision on this host, one at another batch, one of another
    host; the script itself is measured."""
    from dataclasses import replace

    from conftest import ok_metrics, record_parts
    from test_part_ids import SPEC

    from loaderbench.core import provenance
    from loaderbench.core.cells import CellSpec
    from loaderbench.core.records import make_record

    here = provenance.host()
    spec = replace(CellSpec(**SPEC), batch_size=4, precision="fp32", model="mobilenet_v2")
    made = [
        (spec, 2000.0, here),
        (replace(spec, loader="opencv"), 50.0, here),
        (replace(spec, batch_size=8), 9000.0, here),
        (replace(spec, loader="dali-cpu"), 9000.0, {**here, "hostname": "elsewhere"}),
    ]
    grid = tmp_path / "cells"
    grid.mkdir()
    for k, (s, rate, host) in enumerate(made):
        window = {"ci95_rel_halfwidth": 0.02}
        record = make_record(s, "ok", ok_metrics(samples_per_s=rate, window=window), **record_parts(host))
        (grid / f"{k}.json").write_text(json.dumps(record))
    path = script(tmp_path, "train.py", MOBILENET)
    done, record = watch(tmp_path, [sys.executable, str(path)], "--records", str(grid))
    assert done.returncode == 0, done.stderr
    assert record["spec"]["model"] == "mobilenet_v2" and record["cell_id"] == "script-train_watch_g1_b4_fp32_dp_r0"
    ranked = record["watch"]["grid"]
    assert [r["configuration"] for r in ranked] == ["torchvision_ram_g1_b4_fp32_dp", "opencv_ram_g1_b4_fp32_dp"]
    fast, slow = (r["ratio"] for r in ranked)
    assert fast["low"] > 1 > slow["high"]  # 2000/s and 50/s against about 200/s, both outside their intervals
    assert abs(fast["value"] - 2000 / record["metrics"]["samples_per_s"]) < 1e-9
    assert "torchvision_ram_g1_b4_fp32_dp: 2000.0 samples/s" in done.stderr


@pytest.mark.slow
def test_records_of_parts_alone_give_the_whatifs_predictions_for_the_scripts_model(tmp_path):
    """A grid that measured only parts (two loaders alone, the model's ceiling) on this host: the watch ranks the
    ceiling, then each loader's predicted rate for the script's model against the script's; the run's other JSON
    files (config, tables) are no records and are not counted as unreadable."""
    from dataclasses import replace

    from conftest import ok_metrics, record_parts
    from test_part_ids import SPEC

    from loaderbench.core import provenance
    from loaderbench.core.cells import CellSpec
    from loaderbench.core.records import make_record

    here = provenance.host()
    spec = replace(CellSpec(**SPEC), batch_size=4, precision="fp32", model="none")
    made = [
        (spec, 3000.0),  # torchvision alone
        (replace(spec, loader="opencv"), 60.0),
        (replace(spec, loader="synthetic", model="mobilenet_v2"), 900.0),  # the ceiling
    ]
    grid = tmp_path / "run"
    (grid / "cells").mkdir(parents=True)
    (grid / "config.json").write_text(json.dumps({"name": "parts"}))
    for k, (s, rate) in enumerate(made):
        window = {"ci95_rel_halfwidth": 0.02}
        record = make_record(s, "ok", ok_metrics(samples_per_s=rate, window=window), **record_parts(here))
        (grid / "cells" / f"{k}.json").write_text(json.dumps(record))
    path = script(tmp_path, "train.py", MOBILENET)
    done, record = watch(tmp_path, [sys.executable, str(path)], "--records", str(grid))
    assert done.returncode == 0, done.stderr
    assert "synthetic_ram_g1_b4_fp32_dp: 900.0 samples/s" in done.stderr  # the ceiling: the one cell of its model
    assert "unreadable" not in done.stderr
    assert "predicted from this host's parts, not measured" in done.stderr
    lines = [x for x in done.stderr.splitlines() if "samples/s predicted" in x]
    assert len(lines) == 2 and "torchvision_ram_g1_b4_fp32_dp:" in lines[0] and "opencv_ram_g1_b4_fp32_dp:" in lines[1]
    assert "60.0 samples/s predicted" in lines[1]  # opencv alone is slower than the ceiling: the loader binds
    kept = record["watch"]["predicted"]
    assert [p["configuration"] for p in kept] == ["torchvision_ram_g1_b4_fp32_dp", "opencv_ram_g1_b4_fp32_dp"]


IMAGEFOLDER = """
import sys, time, torch, torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

data = torchvision.datasets.ImageFolder(sys.argv[1], transforms.Compose([transforms.Resize((16, 16)), transforms.ToTensor()]))
model = torchvision.models.resnet18(num_classes=3)  # built, never run: the step only sleeps
for epoch in range(2):
    for x, y in DataLoader(data, batch_size=4, num_workers=1):
        time.sleep(0.005)
"""


@pytest.mark.slow
def test_emit_config_writes_a_grid_validate_config_accepts(tmp_path, small_dataset):
    import yaml

    path = script(tmp_path, "folder.py", IMAGEFOLDER)
    config = tmp_path / "grid.yaml"
    done, record = watch(tmp_path, [sys.executable, str(path), str(small_dataset)], "--emit-config", str(config))
    assert done.returncode == 0, done.stderr
    assert record["watch"]["dataset_root"] == str(small_dataset) and record["spec"]["model"] == "resnet18"
    cfg = yaml.safe_load(config.read_text())
    assert cfg["dataset"] == {"source": "path", "path": str(small_dataset)}
    assert (cfg["batch_sizes"], cfg["workers"], cfg["models"], cfg["precisions"]) == ([4], 1, ["resnet18"], ["fp32"])
    check = [sys.executable, "-m", "loaderbench", "validate-config", "--config", str(config)]
    valid = subprocess.run(check, check=False, capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=120)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "valid (" in valid.stdout


@pytest.mark.slow
def test_an_existing_sitecustomize_still_runs(tmp_path):
    """The watch's sitecustomize comes first on PYTHONPATH and imports the one it hides."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 'ran'\n")
    path = script(
        tmp_path,
        "plain.py",
        "import builtins, sys\nprint(builtins.THEIRS, '_loaderbench_watch_probe' in sys.modules)\n",
    )
    out = tmp_path / "watch-out"
    cmd = [sys.executable, "-m", "loaderbench", "watch", "--out", str(out), "--", sys.executable, str(path)]
    e = env()
    e["PYTHONPATH"] = os.pathsep.join([e["PYTHONPATH"], str(theirs)])
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=e, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran True\n"


INTERRUPTED = """
import sys, time
try:
{body}
    time.sleep(600)
except KeyboardInterrupt:
    print("interrupted")
    sys.exit(5)
"""


@pytest.mark.slow
def test_ctrl_c_to_the_watch_reaches_the_command(tmp_path):
    """SIGINT to the watch alone (the command runs in its own process group) is passed on to the command's group."""
    body = textwrap.indent(SCRIPT.format(sample_s=0.001, step_s=0.002, workers=0, batches=20, batch=2), "    ")
    path = script(tmp_path, "ctrlc.py", INTERRUPTED.format(body=body))
    out = tmp_path / "watch-out"
    cmd = [sys.executable, "-m", "loaderbench", "watch", "--out", str(out), "--", sys.executable, str(path)]
    # SIGINT as a shell's foreground command has it, whatever this test run inherited: a background job of a
    # non-interactive shell starts with it ignored, and an ignored SIGINT stays ignored across exec (a handled one
    # does not)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 60
    while not list((out / "probe").glob("probe-*.log")) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the script's 20 batches are done, it sleeps
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 5, stderr
    assert stdout == "trained\ninterrupted\n"
