"""A real single-node Slurm cluster (Debian's munge, slurmctld, slurmd) for the Slurm end-to-end test.

Started as root with a minimal slurm.conf: no accounting daemon, `proctrack/linuxproc` and `task/none` (no cgroups
here). Job steps (`srun` inside a job) read only the default path /etc/slurm/slurm.conf, so the config is written
there; a config that was already there is kept aside and put back. Every daemon started is stopped by its pid, and
the daemons of an earlier test run that was killed before its teardown are found and stopped first.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "srun")


def missing() -> list[str]:
    """What this machine lacks to run the cluster (empty when it can)."""
    out = [d for d in DAEMONS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if os.geteuid() != 0:
        out.append("root (slurmd and munged run as root here)")
    return out


def running(pid: int) -> bool:
    """Alive and not a zombie (the daemons' parent here may never reap them)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


CLUSTER = "loaderbench-test"


def clean_stale() -> list[str]:
    """Stop the daemons of an earlier test cluster whose run was killed before its teardown; returns their names.

    Recognised by the ClusterName this harness writes into /etc/slurm/slurm.conf; its pid files say what to stop.
    """
    if not CONF.exists() or f"ClusterName={CLUSTER}" not in CONF.read_text():
        return []
    settings = dict(line.split("=", 1) for line in CONF.read_text().splitlines() if "=" in line)
    state = Path(settings["StateSaveLocation"]).parent
    stopped = []
    for name, pidfile in (
        ("slurmd", state / "slurmd.pid"),
        ("slurmctld", state / "slurmctld.pid"),
        ("munged", state / "munge" / "munged.pid"),
    ):
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            continue
        if running(pid):
            _stop(pid)
            stopped.append(name)
    CONF.unlink()
    return stopped


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(40):
        if not running(pid):
            return
        time.sleep(0.25)
    os.kill(pid, signal.SIGKILL)


def _conf(state: Path, host: str, cpus: int, mem_mb: int) -> str:
    return f"""ClusterName={CLUSTER}
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/spool
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd.pid
SlurmctldLogFile={state}/slurmctld.log
SlurmdLogFile={state}/slurmd.log
NodeName={host} CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.5)
    raise TimeoutError(f"Slurm test cluster: {what} within {timeout:g} s")


@contextmanager
def slurm_cluster(state: Path):
    """Start munged, slurmctld and slurmd; yield (environment for Slurm clients, [(daemon, pid)]); stop them."""
    clean_stale()
    state.mkdir(parents=True, exist_ok=True)
    for d in ("ctld", "spool", "munge"):
        (state / d).mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    mem_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    saved = CONF.with_name("slurm.conf.loaderbench-saved")
    if CONF.exists():
        shutil.copy2(CONF, saved)  # a real site config: put back afterwards
    elif not saved.exists():  # (one left by a killed run already holds the original)
        saved = None
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(_conf(state, host, os.cpu_count() or 1, mem_mb))
    procs: list[tuple[str, int]] = []
    default_sock = Path("/run/munge/munge.socket.2")
    try:
        sock = state / "munge" / "munge.socket"
        subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={sock}",
                f"--pid-file={state / 'munge' / 'munged.pid'}",
                f"--log-file={state / 'munge' / 'munged.log'}",
                f"--seed-file={state / 'munge' / 'munged.seed'}",
            ],
            check=True,
        )
        procs.append(("munged", int((state / "munge" / "munged.pid").read_text())))
        # Slurm's munge plugin finds munged through this socket path (the default one may not exist here).
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        if default_sock.is_symlink() or default_sock.exists():
            default_sock.unlink()
        default_sock.symlink_to(sock)
        subprocess.run(["slurmctld"], check=True)
        _wait(lambda: (state / "slurmctld.pid").exists(), 30, "slurmctld wrote no pid file")
        procs.append(("slurmctld", int((state / "slurmctld.pid").read_text())))
        subprocess.run(["slurmd"], check=True)
        _wait(lambda: (state / "slurmd.pid").exists(), 30, "slurmd wrote no pid file")
        procs.append(("slurmd", int((state / "slurmd.pid").read_text())))

        def node_idle() -> bool:
            out = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, check=False
            ).stdout.split()
            return bool(out) and all(s.startswith("idle") for s in out)

        _wait(node_idle, 60, "the node did not become idle")
        yield {**os.environ, "SLURM_CONF": str(CONF)}, procs
    finally:
        for _, pid in reversed(procs):
            _stop(pid)
        if saved:
            shutil.move(saved, CONF)
        else:
            CONF.unlink(missing_ok=True)
        if default_sock.is_symlink() and str(state) in os.readlink(default_sock):
            default_sock.unlink()
