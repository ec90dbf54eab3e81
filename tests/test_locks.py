"""Run locks (sparta/engine/locks.py) with real snakemake processes on a workflow of one job that
waits for a file, so each run ends exactly when the test says: two runs side by side keep
their own locks whichever ends first, a kill -9 leaves only the dead run's locks to remove,
a second snakemake on a live run stops naming it. The whole workflow side by side is in
test_side_by_side.py."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _start(tmp: Path, run: str) -> subprocess.Popen:
    return subprocess.Popen(
        _cmd(tmp, run), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.fixture
def start(tmp_path):
    """Start a run; the groups still running when the test ends (it failed) are killed."""
    procs = []
    yield lambda run: procs.append(_start(tmp_path, run)) or procs[-1]
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _run(tmp: Path, run: str, *extra: str, also: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(tmp, run, *extra, also=also), capture_output=True, text=True, timeout=120)


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
