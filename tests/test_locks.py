"""Run locks (sparta/engine/locks.py) with real snakemake processes on a workflow of one job that
waits for a file, so each run ends exactly when the test says: two runs side by side keep
their own locks whichever ends first, a kill -9 leaves only the dead run's locks to remove,
a second snakemake on a live run stops naming it. The whole workflow side by side is in
test_side_by_side.py. Where the file system has no flock, Snakemake's own locks apply, with one
warning."""

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparta.engine import locks

SNAKEFILE = """
from sparta.engine import locks

locks.install(workflow, config["run"])

rule all:
    input: [f"results/{run}/done" for run in (config["run"], config.get("also")) if run]

rule work:
    output: "results/{run}/done"
    shell: "while [ ! -e go-{wildcards.run} ]; do sleep 0.1; done; echo {wildcards.run} > {output}"
"""


def _cmd(tmp: Path, run: str, *extra: str, also: str = "") -> list[str]:
    snakefile = tmp / "Snakefile"
    if not snakefile.exists():
        snakefile.write_text(SNAKEFILE)
    work = tmp / "work"
    return [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(snakefile),
        "-d",
        str(work),
        "--cores",
        "1",
        "--config",
        f"run={run}",
        f"also={also}",
        *extra,
    ]


def _start(tmp: Path, run: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(tmp, run),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


@pytest.fixture
def start(tmp_path):
    """Start a run; the groups still running when the test ends (it failed) are killed."""
    procs = []
    yield lambda run, env=None: procs.append(_start(tmp_path, run, env)) or procs[-1]
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _run(tmp: Path, run: str, *extra: str, also: str = "", env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        _cmd(tmp, run, *extra, also=also), capture_output=True, text=True, timeout=120, env=env
    )


def _locks_of(work: Path, run: str) -> list[str]:
    """Snakemake's lock files that lock this run's output."""
    folder = work / ".snakemake" / "locks"
    found = [p.name for p in folder.glob("*.lock")] if folder.is_dir() else []
    return sorted(n for n in found if f"results/{run}/done" in (folder / n).read_text())


def _wait_locked(work: Path, run: str, proc: subprocess.Popen) -> None:
    """Until this process has written and recorded its run's lock files (its job then waits)."""
    flock = work / ".snakemake" / f"sparta-{run}.flock"
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        try:
            record = json.loads(flock.read_text())
            recorded = record["pid"] == proc.pid and record["lock_files"]
        except (OSError, ValueError, KeyError):
            recorded = None
        if recorded and _locks_of(work, run):
            return
        time.sleep(0.1)
    raise AssertionError(f"{run} did not lock")


def _finish(tmp: Path, run: str, proc: subprocess.Popen) -> str:
    (tmp / "work" / f"go-{run}").touch()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


@pytest.mark.slow
def test_runs_side_by_side_keep_their_locks_and_a_second_one_is_refused(tmp_path, start):
    work = tmp_path / "work"
    alpha, beta = start("alpha"), start("beta")
    _wait_locked(work, "alpha", alpha)
    _wait_locked(work, "beta", beta)
    beta_locks = _locks_of(work, "beta")

    # alpha dies hard; its restart removes alpha's locks and only those
    os.killpg(alpha.pid, signal.SIGKILL)
    alpha.wait(timeout=30)
    dead = _locks_of(work, "alpha")
    assert dead  # left behind by the dead run
    alpha = start("alpha")
    _wait_locked(work, "alpha", alpha)
    assert _locks_of(work, "beta") == beta_locks
    recorded = json.loads((work / ".snakemake" / "sparta-alpha.flock").read_text())["lock_files"]
    assert _locks_of(work, "alpha") == sorted(recorded) and len(recorded) == len(dead)  # none left over

    # --unlock removes no live run's locks
    unlock = _run(tmp_path, "alpha", "--unlock")
    assert unlock.returncode == 0, unlock.stderr
    assert "kept the locks of a live run: experiment 'beta'" in unlock.stderr, unlock.stderr
    assert _locks_of(work, "beta") == beta_locks and _locks_of(work, "alpha")

    # alpha ends first: beta keeps its locks, and a second snakemake on beta is refused
    out = _finish(tmp_path, "alpha", alpha)
    assert "removed the locks of a snakemake that died: experiment 'alpha'" in out, out
    assert beta.poll() is None and _locks_of(work, "beta") == beta_locks
    second = _run(tmp_path, "beta")
    text = second.stdout + second.stderr
    assert second.returncode != 0
    started = json.loads((work / ".snakemake" / "sparta-beta.flock").read_text())["started"]
    assert f"experiment 'beta' is already being run in {work} by snakemake pid {beta.pid} on host" in text
    assert f"started {started}" in text and f"kill {beta.pid}" in text, text
    assert "Directory cannot be locked" not in text, text
    assert _locks_of(work, "beta") == beta_locks and not (work / "results" / "beta" / "done").exists()
    # a run that would write a file of beta stops too, naming beta
    gamma = _run(tmp_path, "gamma", also="beta")
    text = gamma.stdout + gamma.stderr
    assert gamma.returncode != 0
    assert "experiment 'gamma' cannot start" in text and f"'beta' (snakemake pid {beta.pid}" in text, text
    assert "results/beta/done" in text and _locks_of(work, "beta") == beta_locks, text

    _finish(tmp_path, "beta", beta)
    assert (work / "results" / "beta" / "done").read_text() == "beta\n"
    assert not list((work / ".snakemake" / "locks").glob("*"))


# --- a file system without flock (Lustre noflock, NFS without lockd) ---------------------------

NO_FLOCK = """
import errno, fcntl, os


def _fail(*args, **kwargs):
    raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))


fcntl.flock = fcntl.lockf = _fail
"""
WARNING = "sparta's run locks are off (Snakemake's own apply"


def _fail_flock(monkeypatch, code: int = errno.ENOLCK) -> None:
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", fail)
    monkeypatch.setattr(fcntl, "lockf", fail)


@pytest.fixture
def main_process(tmp_path, monkeypatch):
    """A main snakemake process's workflow in an empty folder, locks' state its own."""
    from types import SimpleNamespace

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(locks, "_said", set())
    monkeypatch.setattr(locks, "_run", dict(locks._run))
    monkeypatch.delenv(locks.VARIABLE, raising=False)
    return SimpleNamespace(is_main_process=True)


@pytest.mark.parametrize(
    "code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL], ids=errno.errorcode.get
)
def test_without_flock_the_engine_changes_nothing_and_warns_once(main_process, monkeypatch, capsys, code):
    from snakemake.persistence import PersistenceBase
    from snakemake.persistence.file import FilePersistence

    before = (PersistenceBase.lock, PersistenceBase.cleanup_locks, FilePersistence._delete_locks)
    _fail_flock(monkeypatch, code)
    locks.install(main_process, "alpha")
    locks.install(main_process, "alpha")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and WARNING in lines[0], lines
    assert f"with {errno.errorcode[code]}: " in lines[0] and "snakemake --unlock" in lines[0]
    assert (PersistenceBase.lock, PersistenceBase.cleanup_locks, FilePersistence._delete_locks) == before


def test_a_flock_that_fails_later_closes_its_file_and_names_the_switch(main_process, monkeypatch):
    from snakemake.exceptions import CliException

    folder = Path(".snakemake").absolute()
    folder.mkdir()
    locks._run["name"] = "alpha"
    _fail_flock(monkeypatch)
    opened = len(os.listdir("/proc/self/fd"))
    with pytest.raises(
        CliException, match="flock fails on .*sparta-alpha.flock with ENOLCK.*SPARTA_LOCKS=none"
    ):
        with locks._refused():
            locks.acquire(folder)
    with pytest.raises(locks.NoFlock, match="sparta.flock with ENOLCK"):
        with locks.registry(folder):
            pass
    assert len(os.listdir("/proc/self/fd")) == opened and locks._registry["depth"] == 0


def test_sparta_locks_none_takes_no_flock_and_another_value_stops(main_process, monkeypatch, capsys):
    from snakemake.exceptions import WorkflowError

    monkeypatch.setattr(fcntl, "flock", lambda *args: pytest.fail("flock taken"))
    monkeypatch.setenv(locks.VARIABLE, "none")
    locks.install(main_process, "alpha")
    assert f"warning: {locks.VARIABLE}=none: {WARNING}" in capsys.readouterr().err
    assert not Path(".snakemake").exists()
    monkeypatch.setenv(locks.VARIABLE, "lockf")
    with pytest.raises(WorkflowError, match="SPARTA_LOCKS='lockf': use flock"):
        locks.install(main_process, "alpha")


@pytest.mark.slow
def test_without_flock_a_dry_run_and_a_run_work_on_snakemake_s_own_locks(tmp_path, start):
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(NO_FLOCK)
    path = os.pathsep.join(p for p in (str(inject), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    work = tmp_path / "work"

    dry = _run(tmp_path, "alpha", "-n", env=env)
    assert dry.returncode == 0, dry.stderr
    warned = [line for line in dry.stderr.splitlines() if WARNING in line]
    assert len(warned) == 1 and "sparta.flock with ENOLCK" in warned[0], dry.stderr

    alpha = start("alpha", env)
    deadline = time.time() + 120
    while not _locks_of(work, "alpha"):  # Snakemake's own lock files
        assert alpha.poll() is None and time.time() < deadline
        time.sleep(0.1)
    second = _run(tmp_path, "alpha", env=env)
    assert second.returncode != 0 and "Directory cannot be locked" in second.stdout + second.stderr
    out = _finish(tmp_path, "alpha", alpha)
    assert out.count(WARNING) == 1, out
    assert (work / "results" / "alpha" / "done").read_text() == "alpha\n"
    assert not list((work / ".snakemake").glob("sparta-*.flock"))
