"""Two experiments side by side in one folder, on tiny random models: one is killed hard and
recovered while the other runs; the other outlives it (it is paused meanwhile, as a slower
run would be), keeps its locks, refuses a second snakemake, and every file of both equals
the file of a run alone. The lock mechanics on their own are in test_locks.py."""

import json
import os
import signal
import subprocess
import time

import pytest

from .workflow_helpers import run_snakemake, snakemake_cmd, tiny_config, write_config

pytestmark = pytest.mark.slow


def _small(base, experiment, seed):
    members = [{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")]
    off = {"enabled": False}
    return tiny_config(
        base,
        experiment,
        seed=seed,
        iterations=1,
        members=members,
        prompts={"per_iteration": 4},
        evaluation=off,
        analysis=off,
    )


def _targets(exp):
    """What each command asks for: the run up to its last (only) iteration's preferences and
    standings, and its settings; no DPO (the locks, the kill and the recovery all happen
    before it: one model job less per run)."""
    return [
        f"results/{exp}/{name}"
        for name in ("iter_1/preferences.parquet", "final_state.parquet", "settings.yaml")
    ]


def _locks_of(work, exp):
    """Name and content of the snakemake lock files that list files of results/<exp>/."""
    folder = work / ".snakemake" / "locks"
    texts = {p.name: p.read_text() for p in folder.glob("*.lock")} if folder.is_dir() else {}
    return {name: text for name, text in texts.items() if f"results/{exp}/" in text}


@pytest.fixture
def started():
    """Processes the test starts: their groups are killed if the test fails before they end."""
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_two_experiments_side_by_side_keep_their_locks_and_equal_runs_alone(tmp_path, tiny_base, started):
    configs = {e: write_config(tmp_path / e, _small(tiny_base, e, s)) for e, s in (("alpha", 7), ("beta", 8))}
    work = tmp_path / "work"
    logs = {e: open(tmp_path / f"{e}.log", "w") for e in configs}

    def start(e):
        cmd = snakemake_cmd(work, configs[e], *_targets(e))
        started.append(
            subprocess.Popen(cmd, stdout=logs[e], stderr=subprocess.STDOUT, start_new_session=True)
        )
        return started[-1]

    alpha, beta = start("alpha"), start("beta")
    judging = work / "results/alpha/logs/iter_1/round_0/judge_pool.log"
    deadline = time.time() + 900
    while time.time() < deadline and alpha.poll() is None and not judging.is_file():
        time.sleep(0.2)
    time.sleep(1.0)  # alpha is loading or judging
    assert alpha.poll() is None and beta.poll() is None, "a run ended before the kill"
    os.killpg(beta.pid, signal.SIGSTOP)  # beta goes on later: it outlives alpha
    beta_locks = _locks_of(work, "beta")
    assert beta_locks, "beta holds no lock"
    os.killpg(alpha.pid, signal.SIGKILL)
    assert alpha.wait(timeout=60) == -signal.SIGKILL
    assert not (work / "results/alpha/iter_1/round_0/history.parquet").exists(), "killed too late"

    recovery = run_snakemake(work, configs["alpha"], *_targets("alpha"))  # the same command, beta still alive
    assert "removed the locks of a snakemake that died: experiment 'alpha'" in recovery.stderr
    assert beta.poll() is None and _locks_of(work, "beta") == beta_locks  # alpha's end left them
    second = run_snakemake(work, configs["beta"], *_targets("beta"), check=False, timeout=300)
    text = second.stdout + second.stderr
    assert second.returncode != 0
    started = json.loads((work / ".snakemake/sparta-beta.flock").read_text())["started"]
    assert f"experiment 'beta' is already being run in {work} by snakemake pid {beta.pid}" in text, text
    assert f"started {started}" in text and "Directory cannot be locked" not in text, text
    os.killpg(beta.pid, signal.SIGCONT)
    assert beta.wait(timeout=900) == 0, (tmp_path / "beta.log").read_text()[-3000:]
    assert not list((work / ".snakemake/locks").glob("*"))

    alone = tmp_path / "alone"
    for e in configs:
        run_snakemake(alone, configs[e], *_targets(e))
    files = sorted(p.relative_to(alone) for p in (alone / "results").rglob("*") if p.is_file())
    files = [f for f in files if "logs" not in f.parts and "benchmarks" not in f.parts]
    # 21 a run: 3 prompt splits, the initial state and 3 member.json, duels, 3 responses, 3
    # judgments, the round's state, history and preferences, the iteration's preferences,
    # reputation history, final state, settings
    assert len(files) >= 42, files
    assert (
        sorted(
            p.relative_to(work)
            for p in (work / "results").rglob("*")
            if p.is_file() and "logs" not in p.parts and "benchmarks" not in p.parts
        )
        == files
    )
    differ = [str(f) for f in files if (alone / f).read_bytes() != (work / f).read_bytes()]
    assert not differ, differ
