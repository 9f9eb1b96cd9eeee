# Configuration (validated against the schema, defaults filled), the grid of cells, and input functions.
import json
import os
import shlex
import sys
from pathlib import Path

import yaml
from snakemake.utils import update_config

from loaderbench.core.cells import CELL_ID_PATTERN, cell_ids, cell_spec, parse_cell_id
from loaderbench.core.config import dataset_source_dir, validate_config
from loaderbench.core.layout import DATASETS, RESULTS as R
from loaderbench.core.provenance import run_id
from loaderbench.core.records import CorruptRecord, load_records, read_record
from loaderbench.core.util import stable_hash
from loaderbench.core.whatifgrid import matrix_gpus
from snakemake.settings.types import DeploymentMethod

# Parsing this file changes nothing on disk in the Snakemake a user starts: `snakemake -n`, `--lint`, `--list` and
# the like parse it too (and `make test` runs `--lint` in the user's checkout). What a run must change before its jobs
# is done in `onstart:`, which only a run that executes jobs calls, after the DAG is built and before any job starts.

DEFAULT_CONFIG = "config/quickstart.yaml"
run_id()  # one id for this invocation, inherited by every job it starts (records say which run they belong to)
# Jobs other than cells call the package through the Python running Snakemake (a virtualenv needs no activation).
# Every value from the config or the file system that reaches a shell command is quoted ({...:q}).
# With --use-conda they run in HOST_ENV instead (loaderbench from this checkout): the package in that env's Python.
HOST_ENV = "../envs/loaderbench.yaml"  # relative to the rule files
SNAKEMAKE_LB = f"{shlex.quote(sys.executable)} -m loaderbench"
LB = (
    "python -m loaderbench"
    if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
    else SNAKEMAKE_LB
)

# No `configfile:` directive: Snakemake would merge a --configfile into it key by key (mixing the two grids'
# storage maps). Without --configfile the embedded default is used, with any --config overrides on top.
if not workflow.configfiles:
    _raw = yaml.safe_load(Path(workflow.basedir, DEFAULT_CONFIG).read_text())
    update_config(_raw, config)
    config.clear()
    config.update(_raw)

# What lies on this machine is checked here too (a missing dataset, a tier path that is a file, a plugin whose
# module cannot be found, a batch larger than a path source's images), so `snakemake -n` reports it.
CFG = validate_config(config, base_dir=Path.cwd(), check_paths=True)
CELLS = cell_ids(CFG)
# With budget_minutes the cells are the plan's kept ones (`loaderbench plan` prints the same plan); a study over its
# budget (without trim, or beyond what trim may leave out) stops here with the plan's figures. Without a budget the
# records are not read here.
if CFG["budget_minutes"] is not None:
    from loaderbench.plan.predict import workflow_cells

    CELLS = workflow_cells(CFG, R)
TIERS = CFG["tiers"]
WHATIF_GPUS = matrix_gpus(CFG)  # the GPU counts the what-if's matrix is predicted at
DATASET = CFG["dataset"]
GENERATED = DATASET["source"] == "generated"


# Containers: with --use-singularity (alias of --software-deployment-method apptainer) cell jobs run inside
# CFG["container"]["image"]. The arguments Snakemake passes are completed here from the config, so the default
# profile needs no hand-written --apptainer-args (whose "--nv" value argparse would take for an option).
USE_CONTAINER = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
SRC = str(Path(workflow.basedir, "src").resolve())


def lock_dir_to_bind(cfg):
    """The host lock directory a cell container must have bound, or None where it lies under /tmp (bound by default)."""
    from loaderbench.engine.runner.hostlock import lock_directory

    locks = lock_directory(cfg["host"]["lock_dir"])
    return None if str(locks.resolve()).startswith("/tmp/") else locks


def bind_paths(cfg):
    """The host paths a cell container needs bound, each once and parents first: tiers, the emulated tiers' mount
    points' folders, the dataset source, the project, extras and the lock directory. A path under another one is left
    out (the runtimes bind recursively); so is an emulated tier's mount point itself: bound, it would be a mount point
    inside the container already (of the host's filesystem), which the cell refuses to mount its tier over, so its
    folder is bound instead where no other bind holds it."""
    tiers = cfg["storage"].values()
    paths = [
        *(t["path"] for t in tiers),
        *(Path(t["mount"]).resolve().parent for t in tiers if t["mount"]),
        workflow.basedir,
        *cfg["container"]["binds"],
    ]
    if cfg["dataset"]["source"] == "path":
        paths.append(cfg["dataset"]["path"])
    locks = lock_dir_to_bind(cfg)
    if locks:  # made by make_bound_dirs before a cell runs, not here (parsing changes nothing)
        paths.append(locks)
    kept = []
    for p in sorted({Path(p).resolve() for p in paths}, key=lambda p: p.parts):
        if p != Path("/") and not any(p.is_relative_to(k) for k in kept):
            kept.append(p)
    return kept


def apptainer_args(cfg, existing):
    """`existing` plus --nv and one --bind per host path a cell needs (bind_paths)."""
    have = shlex.split(existing)
    add = ["--nv"] if cfg["container"]["nv"] and "--nv" not in have else []
    for p in map(str, bind_paths(cfg)):
        if p not in have:
            add += ["--bind", p]
    return " ".join([*map(shlex.quote, have), *map(shlex.quote, add)])


# Exclusive measurement (config `host:`, src/loaderbench/engine/runner/hostlock.py): the lock directory, wait limit and contention
# thresholds reach run-cell and probe-tier as options. They are globals in the shell command, not params: params
# (and spec fields) are rerun triggers, and these settings must not re-measure cells.
HOST = CFG["host"]
HOST_LOCK_ARGS = f"--lock-wait-s {shlex.quote(str(HOST['lock_wait_s']))}"
if HOST["lock_dir"] or USE_CONTAINER:  # a container need not see the host's LOADERBENCH_LOCK_DIR (--cleanenv)
    from loaderbench.engine.runner.hostlock import lock_directory

    HOST_LOCK_ARGS += f" --lock-dir {shlex.quote(str(lock_directory(HOST['lock_dir']).resolve()))}"
HOST_ARGS = (
    f"{HOST_LOCK_ARGS} --contention-cpu-cores {shlex.quote(str(HOST['contention_cpu_cores']))} "
    f"--contention-gpu-processes {shlex.quote(str(HOST['contention_gpu_processes']))}"
)


onstart:
    set_aside_unreadable_records()
    make_bound_dirs()
    # SIGINT/SIGTERM to Snakemake's pid alone: stop the measuring job now instead of letting it finish
    from loaderbench.engine.runner.hostlock import stop_measurements_on_signals

    stop_measurements_on_signals()
    if HOST["warm_start"] and not USE_CONTAINER and workflow.local_exec:
        # the fork server the cells start their measuring processes from (dies with this Snakemake); not for jobs
        # that run elsewhere (Slurm: on other nodes) or in containers (other mounts)
        from loaderbench.engine.runner.warmclient import start_server

        start_server(reuse=HOST["reuse_processes"])


# Records name the commit even where the job's tree has no .git (a container, a copied tree).
if "LOADERBENCH_GIT_COMMIT" not in os.environ:
    from loaderbench.core.provenance import git_commit

    _commit = git_commit()["commit"]
    if _commit:
        os.environ.update(LOADERBENCH_GIT_COMMIT=_commit)
if USE_CONTAINER:
    workflow.deployment_settings.apptainer_args = apptainer_args(CFG, workflow.deployment_settings.apptainer_args)
    # Inside the container the checkout's code runs (bound above) with the image's Python. What a cell needs from
    # the host's environment is set in its command, not inherited: runtimes differ in what they pass (`--cleanenv`
    # passes nothing), and Singularity 2.x names the image by its file name only.
    _image = CFG["container"]["image"]
    CELL_ENV = {
        "PYTHONPATH": SRC,
        "LOADERBENCH_RUN_ID": run_id(),
        "LOADERBENCH_GIT_COMMIT": os.environ.get("LOADERBENCH_GIT_COMMIT", ""),
        "LOADERBENCH_CONTAINER_IMAGE": _image if "://" in _image else str(Path(_image).resolve()),
    }
    CELL_LB = " ".join(f"{k}={shlex.quote(v)}" for k, v in CELL_ENV.items()) + " python3 -m loaderbench"
    print(
        f"loaderbench: the {len(CELLS)} cell jobs run in the container {CFG['container']['image']} "
        f"(apptainer exec {workflow.deployment_settings.apptainer_args}); other jobs run on the host",
        file=sys.stderr,
    )
else:
    CELL_LB = SNAKEMAKE_LB


# How a cell is run, not what it measures: passed outside the rule's params so that changing them re-measures
# nothing (every param is a rerun trigger; the spec param is the cell's identity).
CELL_RUN_OPTS = " ".join(
    shlex.quote(str(v))
    for v in (
        "--timeout-s", CFG["cell_timeout_s"],
        "--stall-s", CFG["watchdog"]["stall_s"],
        "--stall-factor", CFG["watchdog"]["step_factor"],
    )
)  # fmt: skip


# The rules' commands call the package through three shell functions defined in the shell prefix, not through
# globals in the commands (invisible to Snakemake's provenance, which its lint flags) nor through params (every
# param is a rerun trigger: a moved virtualenv, a longer timeout or another lock directory would re-measure every
# cell). They hold how a job is run, never what it measures:
#   lb        the package in the Python running Snakemake
#   lb_cell   the package as a cell job runs it (in the container with --use-singularity), with the cell's run
#             options (timeout, watchdog) and the host settings (lock, contention) appended
#   lb_probe  the package with the host lock settings appended (the tier probe measures too)
def _shell_function(name, body):
    return f"{name}() {{ {body}; }}; ".replace("{", "{{").replace("}", "}}")  # shell.prefix formats its text


shell.prefix(
    "set -euo pipefail; "
    + _shell_function("lb", f'{LB} "$@"')
    + _shell_function("lb_cell", f'{CELL_LB} "$@" {CELL_RUN_OPTS} {HOST_ARGS}')
    + _shell_function("lb_probe", f'{LB} "$@" {HOST_LOCK_ARGS}')
)


def cell_gpus(wildcards):
    return parse_cell_id(wildcards.cell)["gpus"]


# Slurm (profiles/slurm): a cell job asks for its GPU count, CPUs and memory per GPU, a runtime, and the
# partition/account when set. The local executor ignores these.
SLURM = CFG["slurm"]
SLURM_PLACEMENT = {k: v for k, v in (("slurm_partition", SLURM["partition"]), ("slurm_account", SLURM["account"])) if v}


wildcard_constraints:
    cell=CELL_ID_PATTERN,
    tier="|".join(TIERS),


def source_fingerprint():
    """Changes when the source dataset changes, so staging reruns (Snakemake's params trigger)."""
    if GENERATED:
        return stable_hash({k: DATASET[k] for k in ("images", "classes", "seed", "quality")})
    n, size, mtime = 0, 0, 0
    stack = [DATASET["path"]]
    while stack:  # os.scandir: one stat per file, fast enough for ImageNet's 1.28M files
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # a missing source was reported when the config loaded (check_paths), naming the key
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            elif e.is_file():
                st = e.stat()
                n, size, mtime = n + 1, size + st.st_size, max(mtime, st.st_mtime_ns)
    return f"{n}-{size}-{mtime}"


def get_source_input():
    """The generated tree is a job's output; a real source (checked to exist when the config loads) is tracked by
    its fingerprint instead."""
    return [f"{DATASETS}/{DATASET['name']}"] if GENERATED else []


def get_cell_manifest(wildcards):
    """The manifest of the tier the cell reads; the cell is forced to run again when its record is unreadable."""
    force_if_unreadable(R.cell(wildcards.cell))
    return R.manifest(parse_cell_id(wildcards.cell)["tier"])


def get_cell_spec(wildcards):
    """The cell's spec as its job's param: a changed one re-measures the cell. A plugin cell's spec carries the
    plugin's version and source hash (read without importing it), so an edited plugin is measured again."""
    return json.dumps(cell_spec(CFG, wildcards.cell).to_dict())


def get_cell_files():
    return [R.cell(c) for c in CELLS]


# A truncated or unreadable cell record (a full disk, a copy cut short) must not fail `aggregate` on every run: this run
# measures its cell again, and the record is kept in the cells folder's corrupt/. Moving it at parse time would move
# it under `-n` and `--lint` too, and an input function cannot make an existing file count as missing. So the cell's
# input function reads its record as the DAG is built (any run that builds one: a dry run shows the cell too) and
# forces the record's job as `--forcerun <record>` would (Snakemake's DAG.forcefiles, read when it decides what
# needs to run, after every job is made); `onstart:`, in real runs only, then moves the forced records aside before
# the cell jobs write new ones. A job on a cluster node builds a DAG of its own job only: it forces nothing.
UNREADABLE_RECORDS = set()  # the records forced in this run for being unreadable
_READ_RECORDS = set()  # each record is read once, however often Snakemake evaluates the input function


def force_if_unreadable(record):
    """Force the job of `record` when the file is there but is no readable cell record (read only, nothing moved)."""
    if record in _READ_RECORDS or not workflow.is_main_process or workflow.dag is None:
        return
    _READ_RECORDS.add(record)
    if not os.path.isfile(record):
        return
    try:
        read_record(record)
    except CorruptRecord as e:
        UNREADABLE_RECORDS.add(record)
        workflow.dag.forcefiles.add(record)
        print(
            f"loaderbench: {e}: its cell is to be measured again (a run moves the record to corrupt/ as it starts)",
            file=sys.stderr,
        )


def set_aside_unreadable_records():
    """Move the records forced for being unreadable to the cells folder's corrupt/ (each named on stderr)."""
    load_records(sorted(UNREADABLE_RECORDS))


def make_bound_dirs():
    """Make the folders cell containers have bound that do not exist yet (a runtime refuses to bind a missing path,
    and a tier's folder is made by its staging job, which may run after another tier's cells): the host lock
    directory, tier paths, mount points' folders. The extra binds and a dataset source must exist already."""
    theirs = {Path(p).resolve() for p in CFG["container"]["binds"]}
    if CFG["dataset"]["source"] == "path":
        theirs.add(Path(CFG["dataset"]["path"]).resolve())
    if USE_CONTAINER:
        for path in bind_paths(CFG):
            if path not in theirs:
                path.mkdir(parents=True, exist_ok=True)


# A cluster job's Snakemake parses this file only to run that one job (its cell, in the container), calls no onstart
# and may run on a node that does not see the submit host's directory: it makes the directory itself.
if not workflow.is_main_process:
    make_bound_dirs()


def get_crosscheck():
    """The summary `loaderbench crosscheck` wrote for this results folder, if it ran (the bundle shows it)."""
    path = Path(R.crosscheck, "crosscheck.json")
    return [str(path)] if path.is_file() else []


def get_final_output():
    # Cell records are targets in their own right: a deleted or missing one is recomputed (with what depends
    # on it) even though the bundle already exists; an intermediate file alone would be left missing.
    return [*get_cell_files(), R.table("cells.csv"), R.bundle, R.bundle_zip]
