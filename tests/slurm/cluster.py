"""A real single-node Slurm (Debian's slurm-wlm + munge) on loopback, for the tests.

``LocalSlurm(folder).start()`` writes a slurm.conf into ``folder``, links it from
/etc/slurm/slurm.conf (where the job step's nested ``srun`` looks: the Slurm job-step plugin
drops ``SLURM_CONF`` from its environment), starts munged (unless one runs), slurmctld and
slurmd, and waits until the node is idle. There is no accounting database, so job status
comes from ``squeue`` (MinJobAge keeps finished jobs visible for an hour).

``start`` raises :class:`SlurmUnavailable` with the reason when it cannot run here (packages
missing, not root, daemons not coming up); the tests skip with that reason.

Also runnable by hand: ``python tests/slurm/cluster.py start /tmp/slurm`` then
``export SLURM_CONF=/tmp/slurm/slurm.conf``; ``... stop /tmp/slurm`` ends it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

INSTALL = "apt-get install -y slurm-wlm munge (as .ci/run does)"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


class SlurmUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return 4000


class LocalSlurm:
    def __init__(self, folder: str | os.PathLike, partition: str = "debug"):
        self.folder = Path(folder).resolve()
        self.partition = partition
        self.conf = self.folder / "slurm.conf"
        self.host = socket.gethostname().split(".")[0]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def _write_conf(self) -> None:
        for sub in ("state", "spool", "log"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        f = self.folder
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=sparta-test",
                    f"SlurmctldHost={self.host}(127.0.0.1)",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    f"StateSaveLocation={f}/state",
                    f"SlurmdSpoolDir={f}/spool",
                    f"SlurmctldPidFile={f}/slurmctld.pid",
                    f"SlurmdPidFile={f}/slurmd.pid",
                    f"SlurmctldLogFile={f}/log/slurmctld.log",
                    f"SlurmdLogFile={f}/log/slurmd.log",
                    f"SlurmctldPort={_free_port()}",
                    f"SlurmdPort={_free_port()}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    "SchedulerType=sched/backfill",
                    "MinJobAge=3600",
                    "ReturnToService=2",
                    "KillWait=5",
                    "MpiDefault=none",
                    f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
                    f"RealMemory={_mem_mb()} State=UNKNOWN",
                    f"PartitionName={self.partition} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )

    def _start_munge(self) -> None:
        probe = subprocess.run(["munge", "-n"], capture_output=True)
        if probe.returncode == 0:
            return  # a munged already answers
        key = Path("/etc/munge/munge.key")
        if not key.is_file():
            subprocess.run(["mungekey", "--create"], check=False, capture_output=True)
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], capture_output=True)
        for _ in range(50):
            if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise SlurmUnavailable("munged did not start (munge -n fails)")

    def start(self, timeout: float = 60) -> LocalSlurm:
        missing = [b for b in ("slurmctld", "slurmd", "sbatch", "squeue", "munged") if not _which(b)]
        if missing:
            raise SlurmUnavailable(f"Slurm is not installed here (missing {', '.join(missing)}): {INSTALL}")
        if os.geteuid() != 0:
            raise SlurmUnavailable("a single-node Slurm needs root here (slurmd runs jobs as their user)")
        self._write_conf()
        if SYSTEM_CONF.is_symlink() and _gone_test_cluster(SYSTEM_CONF.resolve()):
            SYSTEM_CONF.unlink()  # left by a test cluster that is gone (or was killed)
        if SYSTEM_CONF.exists() and SYSTEM_CONF.resolve() != self.conf:
            raise SlurmUnavailable(f"{SYSTEM_CONF} belongs to another Slurm; not touching it")
        SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
        if not SYSTEM_CONF.is_symlink():
            SYSTEM_CONF.symlink_to(self.conf)
        self._start_munge()
        for daemon in ("slurmctld", "slurmd"):
            proc = subprocess.run(
                [_which(daemon), "-f", str(self.conf)], capture_output=True, text=True, env=self.env
            )
            if proc.returncode != 0:
                raise SlurmUnavailable(f"{daemon} did not start: {proc.stderr.strip()}{self._log_tail()}")
        deadline = time.time() + timeout
        state = ""
        while time.time() < deadline:
            try:
                state = self.run("sinfo", "-h", "-o", "%T", check=False).strip()
            except subprocess.TimeoutExpired:
                state = ""
            if state == "idle":
                return self
            time.sleep(0.5)
        self.stop()
        raise SlurmUnavailable(f"the Slurm node did not become idle (state {state!r}){self._log_tail()}")

    def _log_tail(self) -> str:
        tails = []
        for name in ("slurmctld.log", "slurmd.log"):
            log = self.folder / "log" / name
            if log.is_file():
                tails.append(f"\n--- {name}\n" + "\n".join(log.read_text().splitlines()[-8:]))
        return "".join(tails)

    def stop(self) -> None:
        try:
            self._stop_daemons()
        finally:
            if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == self.conf.resolve():
                SYSTEM_CONF.unlink()

    def _stop_daemons(self) -> None:
        try:  # every job first: a job step slurmd started outlives a shutdown daemon
            subprocess.run(
                ["scancel", "--full", "--state=RUNNING,PENDING", "--user", str(os.geteuid())],
                capture_output=True,
                env=self.env,
                timeout=30,
            )
            for _ in range(40):
                if not self.run(
                    "squeue", "--noheader", "--states=RUNNING,PENDING,COMPLETING", check=False
                ).strip():
                    break
                time.sleep(0.5)
        except subprocess.TimeoutExpired:
            pass
        try:
            subprocess.run(["scontrol", "shutdown"], capture_output=True, env=self.env, timeout=60)
        except subprocess.TimeoutExpired:
            pass  # the pid files below are killed
        for pidfile in ("slurmctld.pid", "slurmd.pid"):
            path = self.folder / pidfile
            if not path.is_file():
                continue
            try:
                pid = int(path.read_text().strip())
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld knows (finished ones included): id, state, comment, time limit."""
        out = self.run("squeue", "--states=all", "--noheader", "--format=%i|%T|%k|%l", check=False)
        rows = []
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                rows.append(dict(zip(("id", "state", "comment", "time_limit"), parts)))
        return rows


def processes_of(job: str) -> list[int]:
    """Process ids of this machine that run in Slurm job ``job`` (its ``SLURM_JOB_ID`` in their
    environment): after the job has ended, those escaped Slurm's process tracking."""
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"SLURM_JOB_ID={job}\0".encode() in environ.read_bytes():
                pids.append(int(environ.parent.name))
        except OSError:
            continue  # ended meanwhile, or not ours to read
    return pids


def _gone_test_cluster(conf: Path) -> bool:
    """A slurm.conf this module wrote whose slurmctld no longer runs (a test run that was killed
    before its teardown): safe to replace."""
    try:
        text = conf.read_text()
    except OSError:
        return True
    if "ClusterName=sparta-test" not in text:
        return False
    pidfile = conf.parent / "slurmctld.pid"
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
    except (OSError, ValueError):
        return True
    return False


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/sbin") / name) if p.is_file()), None
    )


if __name__ == "__main__":
    action, folder = sys.argv[1], sys.argv[2]
    cluster = LocalSlurm(folder)
    if action == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
