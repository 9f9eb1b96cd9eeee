"""Where a number came from: software versions, hardware, filesystem, code and inputs."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import time
import uuid
from functools import cache, lru_cache
from pathlib import Path


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:
        return None
    return getattr(mod, "__version__", None)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def filesystem_of(path: str | Path) -> dict:
    """Mount point, filesystem type and device holding `path` (longest matching /proc/mounts entry)."""
    path = os.path.realpath(path)
    best = {"mount_point": None, "fstype": None, "device": None}
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    best_len = -1
    for line in lines:
        dev, mnt, fstype = line.split()[:3]
        mnt = mnt.replace("\\040", " ")
        # >=: of mounts stacked on the same point, the last listed is the one on top
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= best_len:
            best, best_len = {"mount_point": mnt, "fstype": fstype, "device": dev}, len(mnt)
    return best


@lru_cache(maxsize=1)
def git_commit() -> dict:
    """The checkout's commit; LOADERBENCH_GIT_COMMIT stands in where the tree was copied without .git."""
    if os.environ.get("LOADERBENCH_GIT_COMMIT"):
        return {"commit": os.environ["LOADERBENCH_GIT_COMMIT"], "dirty": None}
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        commit = rev.stdout.strip() if rev.returncode == 0 else ""
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": bool(dirty) if commit else None}


def tree_sha256(root: Path) -> str:
    """SHA-256 over the paths and bytes of the Python sources and schema files under `root`, in path order."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and p.suffix in (".py", ".yaml", ".json")):
        h.update(f"{path.relative_to(root)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@cache
def code_sha256() -> str:
    """The loaderbench code that ran, by content (`tree_sha256` of the package). It names the code where the commit
    cannot: a tree copied without .git, or with changes not committed."""
    return tree_sha256(Path(__file__).resolve().parents[1])


# What a runtime sets inside its containers: Apptainer APPTAINER_CONTAINER (the image's path; SINGULARITY_CONTAINER
# too), SingularityCE 3.x SINGULARITY_CONTAINER (the path), Singularity 2.x SINGULARITY_CONTAINER and SINGULARITY_NAME
# as the image's file name only. The workflow names the image itself (CONTAINER_IMAGE_ENV, absolute), so a record says
# which file ran whatever the runtime sets.
CONTAINER_ENV = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "APPTAINER_NAME", "SINGULARITY_NAME")
CONTAINER_IMAGE_ENV = "LOADERBENCH_CONTAINER_IMAGE"


def container() -> dict:
    """Whether this runs in a container, its image as the workflow named it (else as the runtime did), and what the
    runtime itself set (`runtime_env`)."""
    runtime = [(v, os.environ[v]) for v in CONTAINER_ENV if os.environ.get(v)]
    image = os.environ.get(CONTAINER_IMAGE_ENV) or next((value for _, value in runtime), None)
    return {"in_container": bool(image), "image": image, "runtime_env": " ".join(f"{v}={x}" for v, x in runtime)}


def scheduler() -> dict:
    """The batch system job this cell ran in, if any (Slurm sets these in every job)."""
    job = os.environ.get("SLURM_JOB_ID")
    return {"slurm_job_id": job, "slurm_node": os.environ.get("SLURMD_NODENAME")} if job else {"slurm_job_id": None}


def distribution_version(*names: str, prefix: str | None = None) -> str | None:
    """An installed distribution's version from its metadata, without importing it (torch takes seconds)."""
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if prefix:
        for dist in metadata.distributions():
            if (dist.metadata["Name"] or "").lower().startswith(prefix):
                return f"{dist.metadata['Name']} {dist.version}"
    return None


def nvml_query(query, default=None):
    """`query(pynvml)` with NVML open; `default` without nvidia-ml-py, without a driver or on an NVML error."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return default
    try:
        return query(pynvml)
    except Exception:
        return default
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def gpus_by_nvml() -> tuple[list[str], str | None]:
    """(GPU models, driver version) from NVML; ([], None) without a driver."""
    return nvml_query(
        lambda nv: (
            [_text(nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(i))) for i in range(nv.nvmlDeviceGetCount())],
            _text(nv.nvmlSystemGetDriverVersion()),
        ),
        ([], None),
    )


def gpu_memory_used_mb(gpus: int) -> list[float] | None:
    """Memory in use on GPUs 0..gpus-1 as NVML reports it (all processes, the CUDA contexts included)."""
    return nvml_query(
        lambda nv: [nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).used / 2**20 for i in range(gpus)]
    )


def runtime() -> dict:
    """What only a process that has torch loaded can say cheaply: the CUDA runtime and cuDNN it uses."""
    import torch

    cuda = torch.cuda.is_available()
    return {
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpu_models": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
    }


RUN_ID_ENV = "LOADERBENCH_RUN_ID"


def run_id() -> str:
    """The run this process belongs to: LOADERBENCH_RUN_ID, set once by the first loaderbench process of a run (the
    Snakefile, or a command run on its own) and inherited by every job and cell it starts."""
    rid = os.environ.get(RUN_ID_ENV)
    if not rid:
        rid = os.environ[RUN_ID_ENV] = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    return rid


def boot_id() -> str | None:
    """This boot of this machine (Linux's random boot id): records of one boot id came from one machine, where a
    host name can be shared by many (every container of a cluster's nodes may be called the same)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def host(gpu_models: list[str] | None = None) -> dict:
    """This machine as a record's provenance names it; `gpu_models` default: NVML's."""
    return {
        "hostname": socket.gethostname(),
        "boot_id": boot_id(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "gpu_models": gpus_by_nvml()[0] if gpu_models is None else gpu_models,
    }


def collect(tier_path: str | None = None, runtime_info: dict | None = None) -> dict:
    """Provenance of this environment, read without importing the libraries (versions from their metadata, GPUs
    from NVML): the cell runner takes it outside the measuring process. `runtime_info` (from `runtime()` in the
    measuring process) adds the CUDA runtime and cuDNN versions."""
    rt = runtime_info or {}
    gpu_models, driver = gpus_by_nvml()
    return {
        "run_id": run_id(),
        "versions": {
            "python": platform.python_version(),
            "loaderbench": _version("loaderbench"),
            "torch": distribution_version("torch"),
            "torchvision": distribution_version("torchvision"),
            "dali": distribution_version(prefix="nvidia-dali"),
            "opencv": distribution_version("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
            "pillow": distribution_version("pillow", "Pillow"),
            "numpy": distribution_version("numpy"),
            "cuda": rt.get("cuda"),
            "cudnn": rt.get("cudnn"),
            "driver": driver,
        },
        "host": host(rt.get("gpu_models") or gpu_models),
        "tier": {"path": tier_path, **filesystem_of(tier_path)} if tier_path else None,
        "git": git_commit(),
        "code_sha256": code_sha256(),
        "container": container(),
        "scheduler": scheduler(),
    }
