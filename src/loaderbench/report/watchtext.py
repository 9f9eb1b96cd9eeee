"""What a watched run says in words: its rate with its interval, what limits it in a cell's terms, and what the watch
cannot tell without a grid's records.

The rules, in order: the process waited for its batches WAIT_SHARE of a step or more (`diagnose.WAIT_SHARE`, the
share from which a cell's batches count as not ready) -> data-bound; else its main thread was busy MAIN_BUSY of a core
or more, where a GPU runs the step -> limited by the consuming process (the what-if's term, `whatif.terms.CONSUMING`:
the one thread that takes the batches and launches the step); else (and on a CPU, whose main thread computes the
step) the step itself. Which of I/O, CPU preparation or the GPU is behind that needs a
grid's cells: the RAM tier and the `synthetic` ceiling, which a script alone does not run.
"""

from __future__ import annotations

from loaderbench.core.records import warning_lines
from loaderbench.whatif.terms import CONSUMING

from .diagnose import WAIT_SHARE

MAIN_BUSY = 0.9  # cores: a main thread this busy has no time left to take batches sooner
PREFIX = "[watch] "
DATA_BOUND = "data-bound"
CONSUMING_BOUND = f"limited by the {CONSUMING}"
STEP_BOUND = "step-bound"


def diagnosis(record: dict) -> tuple[str, str]:
    """(label, evidence) of an ok watch record, by the rules of this module's docstring."""
    m = record["metrics"]
    share, hw = m["data_wait_fraction"], m.get("data_wait_fraction_ci95")
    interval = f" [{100 * max(share - hw, 0):.0f}, {100 * (share + hw):.0f}]" if hw is not None else ""
    waits = f"waits for its batches {100 * share:.0f}%{interval} of a step"
    slowest = _slowest(m)
    main = slowest.get("main_thread_busy")
    main_text = f"its main thread kept {main:.2f} of a core busy" if main is not None else "main thread's CPU unknown"
    if share >= WAIT_SHARE:
        where = _data_where(record)
        return DATA_BOUND, f"{waits} (from {WAIT_SHARE:.0%} a cell's batches count as not ready); {where}"
    if main is not None and main >= MAIN_BUSY and m["device"]["type"] == "cpu":
        return STEP_BOUND, f"{waits}, and {main_text}: on the CPU that thread runs the model's step itself"
    if main is not None and main >= MAIN_BUSY:
        return CONSUMING_BOUND, f"{waits}, yet {main_text}: the one thread that takes batches and runs the step"
    return STEP_BOUND, f"{waits} and {main_text}: the step itself (the model's compute) sets the rate"


def _slowest(m: dict) -> dict:
    ranks = m["parallel"]["per_rank"]
    return next((r for r in ranks if r["pid"] == m["parallel"].get("slowest_pid")), ranks[0])


def _data_where(record: dict) -> str:
    """What the watch saw of the loader's side: its workers, its cores, the dataset's disk."""
    w = record["watch"]
    m = record["metrics"]
    workers = m.get("workers")
    if workers is None:
        parts = ["a DALI iterator"]
    elif workers == 0:
        parts = ["the DataLoader loads in the training process itself (num_workers=0)"]
    else:
        parts = [f"the DataLoader has {workers} worker process(es)"]
    if m.get("cpu_cores_busy") is not None:
        parts.append(f"the command's processes kept {m['cpu_cores_busy']:.2f} cores busy")
    disk = (record.get("telemetry") or {}).get("disk_read_mb_s")
    if w.get("disk") and disk is not None:
        parts.append(f"{w['disk']} read {disk:.1f} MB/s")
    return ", ".join(parts)


def rate_text(m: dict) -> str:
    """samples/s with its window's 95% interval."""
    rate, hw = m["samples_per_s"], (m.get("window") or {}).get("ci95_rel_halfwidth")
    interval = f" [{rate / (1 + hw):.1f}, {rate * (1 + hw):.1f}]" if hw is not None else " (no interval: short window)"
    return f"{rate:.1f} samples/s{interval}"


def lines(record: dict, record_path, trace_path) -> list[str]:
    """The watch's last screen: the answer, per rank where several, what it cannot tell, its own cost, its files."""
    w = record["watch"]
    out = []
    if record["status"] != "ok":
        out.append(f"{record['cell_id']}: nothing measured: {record['reason']}")
    else:
        m = record["metrics"]
        label, evidence = diagnosis(record)
        out.append(f"{record['cell_id']}: {rate_text(m)}, batch {m['global_batch']} over {m['steps']} steps")
        out.append(f"  {label}: {evidence}")
        out += [f"  warning: {w}" for w in warning_lines(m)]
        ranks = m["parallel"]["per_rank"]
        if len(ranks) > 1:
            for r in ranks:
                out.append(
                    f"  rank {r['rank']} (pid {r['pid']}): {r['samples_per_s']:.1f} samples/s, waits "
                    f"{100 * r['data_wait_fraction']:.0f}% of a step"
                )
            out.append(f"  slowest: rank {m['parallel']['slowest_rank']} (pid {m['parallel']['slowest_pid']})")
        out.append(
            "  not known from a script alone: its compute ceiling (the step with batches ready) and so its AU, and "
            "whether the disk or the CPU's decoding is behind a wait: a grid's cells on this host tell them apart"
        )
        out.append(f"  window: {w['warmup_rule']}")
        other = (m.get("window") or {}).get("other_batches")
        if other:
            out.append(
                f"  left out: {other} batch(es) of other iterables (a validation loader) and the steps they "
                "interrupted; the window follows the iterable with most batches"
            )
        out.append(_probe_cost(ranks))
    gpu = (record.get("telemetry") or {}).get("gpu_reason")
    if gpu:
        out.append(f"  GPU busy and memory: null ({gpu})")
    out.append(f"record: {record_path}  trace: {trace_path}")
    if w["stopped_by_watch"]:
        out.append("the watch stopped the command after --seconds: its exit status is the watch's own (124)")
    else:
        out.append(f"the command's exit status: {w['exit_status']}")
    return [PREFIX + line for line in out]


def _probe_cost(ranks: list[dict]) -> str:
    cost = [r for r in ranks if r.get("probe_us_per_batch") is not None and r.get("probe_share") is not None]
    if not cost:
        return "  the probe's own cost: not known"
    us = max(r["probe_us_per_batch"] for r in cost)
    share = max(r["probe_share"] for r in cost)
    return f"  the probe's own cost: {us:.1f} us a batch, {100 * share:.3f}% of a step"
