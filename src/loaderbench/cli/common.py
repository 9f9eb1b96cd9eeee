"""What the subcommands share: the config of a command line, host settings and lock, and their options."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from loaderbench.core.config import ConfigError, load_config
from loaderbench.core.layout import RESULTS
from loaderbench.core.registry import NO_MODEL


def config_of(a) -> dict:
    """The validated config of the command line's --config."""
    return load_config(a.config)


def host_settings(a, cfg: dict | None = None):
    """Host settings (lock directory, wait limit, contention thresholds): the command line's, else the config's."""
    from loaderbench.engine.runner.hostlock import HostSettings

    base = HostSettings.from_config(cfg)
    over = {
        k: getattr(a, k, None) for k in ("lock_dir", "lock_wait_s", "contention_cpu_cores", "contention_gpu_processes")
    }
    return dataclasses.replace(base, **{k: v for k, v in over.items() if v is not None})


def measuring_lock(a, holder: str, gpus: int, cfg: dict | None = None):
    """The host lock (and the ancestor watch) for a measuring command that is not a cell."""
    from loaderbench.engine.runner.hostlock import gpu_indices, measuring

    return measuring(holder, gpu_indices(gpus), host_settings(a, cfg))


def host_options(s, contention: bool = False) -> None:
    """The `host:` settings as options (Snakemake passes them to run-cell and probe-tier; they override a config's)."""
    s.add_argument(
        "--lock-dir",
        help="host lock directory (default: host.lock_dir, else env LOADERBENCH_LOCK_DIR, else /tmp/loaderbench-locks)",
    )
    s.add_argument("--lock-wait-s", type=float, help="seconds to wait for a busy host before failing (default 1800)")
    if contention:
        s.add_argument(
            "--contention-cpu-cores",
            type=float,
            help="foreign CPU cores in the window above which the cell is contended (default 0.5)",
        )
        s.add_argument(
            "--contention-gpu-processes",
            type=int,
            help="foreign GPU processes in the window above which the cell is contended (default 0)",
        )


def side_measurement(s, func) -> None:
    """What bench, ceiling and sweep share: the results folder they read the staged tiers from, the host lock."""
    s.add_argument("--results", default=RESULTS.root)
    host_options(s)
    s.set_defaults(func=func)


def batch_and_precision(s) -> None:
    """The one configuration a side measurement (ceiling, sweep) runs at."""
    s.add_argument("--batch-size", type=int, help="default: the config's largest")
    s.add_argument("--precision", choices=["fp32", "amp"], default="amp")


def add_required(s, *names: str) -> None:
    """Options the subcommand cannot run without."""
    for name in names:
        s.add_argument(name, required=True)


def write_json(a, obj) -> None:
    """`--json FILE`: also write `obj` there, atomically (nothing when the option is not given)."""
    if a.json:
        from loaderbench.core.util import atomic_write_json

        atomic_write_json(Path(a.json), obj)


def model_option(s, default: str) -> None:
    """`--model`: the one model a side measurement trains instead of the config's."""
    s.add_argument(
        "--model",
        help=f"the model the cells train: one of the config's `models` or any model a config may name (default: "
        f"{default})",
    )


def require_cells(loaders: list[str], models: list[str]) -> None:
    """Refuse loaders and models of which no cell can be made (synthetic x none measures nothing)."""
    from loaderbench.core.cells import is_cell

    if not any(is_cell(lo, m) for lo in loaders for m in models):
        raise ConfigError(
            f"--loaders {' '.join(loaders)} with model {', '.join(models)}: no cell (synthetic x {NO_MODEL} measures "
            "nothing); name a loader that reads files, or a model with --model"
        )
