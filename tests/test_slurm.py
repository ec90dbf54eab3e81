"""The tiny workflow through a real Slurm: `snakemake --profile slurm` from the repository
root, the shipped profile plus a test workflow profile that asks for no GPUs (the test node
has none). One Slurm job is cancelled while it runs; the profile's retry must finish the
run, and every table must equal the local run's."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from .slurm.cluster import LocalSlurm, SlurmUnavailable, processes_of
from .workflow_helpers import REPO, read_all, tiny_config, write_config

pytestmark = pytest.mark.slow
EXP = "results/tiny"
# one iteration through Slurm (every stage, DPO included) with its final members evaluated; the
# local reference ran two and evaluated every checkpoint, and iteration 1 does not depend on
# how many follow
TABLES = (
    f"{EXP}/iter_1/round_*/duels.parquet",
    f"{EXP}/iter_1/round_*/responses/*.parquet",
    f"{EXP}/iter_1/round_*/judgments/*.parquet",
    f"{EXP}/iter_1/round_*/history.parquet",
    f"{EXP}/iter_1/preferences.parquet",
    f"{EXP}/evaluation/checkpoint_1/*.parquet",
)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmUnavailable as e:
        pytest.skip(f"no Slurm here: {e}")
    yield cluster
    cluster.stop()


class Canceller(threading.Thread):
    """Watches the queue; cancels the first job of ``rule`` once it has run a few seconds,
    and records every job it saw (id -> (state, comment, time limit))."""

    def __init__(self, cluster: LocalSlurm, rule: str):
        super().__init__(daemon=True)
        self.cluster, self.rule = cluster, rule
        self.cancelled: dict[str, str] | None = None
        self.seen: dict[str, dict[str, str]] = {}
        self.done = threading.Event()

    def run(self):
        running_since: dict[str, float] = {}
        while not self.done.is_set():
            for job in self.cluster.jobs():
                self.seen[job["id"]] = job
                if self.cancelled or not job["comment"].startswith(f"rule_{self.rule}_"):
                    continue
                if job["state"] == "RUNNING":
                    running_since.setdefault(job["id"], time.time())
                    if time.time() - running_since[job["id"]] > 3:
                        self.cluster.run("scancel", job["id"])
                        self.cancelled = job
            time.sleep(0.5)


def test_tiny_workflow_through_slurm_equals_local_run(slurm, tiny_base, tmp_path, request):
    # fanout member, the cluster default: one Slurm job per member and stage; the final members
    # evaluated (checkpoint 0 is the same kind of job, three more on the test's two cores)
    final = {"checkpoints": "final", "select_from": "final"}
    cfg = write_config(tmp_path, tiny_config(tiny_base, iterations=1, fanout="member", evaluation=final))
    work = tmp_path / "work"
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "slurm",
        "--workflow-profile",
        str(REPO / "tests" / "slurm" / "profile"),
        "-d",
        str(work),
        "--configfile",
        str(cfg),
    ]
    watcher = Canceller(slurm, "dpo")
    watcher.start()
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1500,
            env={**slurm.env, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        watcher.done.set()
        watcher.join()
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    # every model stage ran as a Slurm job, the table rules did not
    rules = {j["comment"].split("_wildcards_")[0].removeprefix("rule_") for j in watcher.seen.values()}
    assert {"sft_member", "combat", "judge", "dpo", "evaluate_member", "analyze"} <= rules, rules
    assert not rules & {"init_member", "matchmake", "aggregate", "gather_preferences", "finalize", "plots"}, (
        rules
    )

    # the cancelled job was retried by the profile and the retry asked for more time
    killed = watcher.cancelled
    assert killed is not None, "no dpo job was seen running long enough to cancel"
    assert watcher.seen[killed["id"]]["state"] == "CANCELLED"
    retries = [
        j for j in watcher.seen.values() if j["comment"] == killed["comment"] and j["id"] != killed["id"]
    ]
    assert retries and all(j["state"] == "COMPLETED" for j in retries)
    assert _minutes(retries[-1]["time_limit"]) > _minutes(killed["time_limit"])

    # the local run served the pool in mixed batches: the same answers and verdicts, scores
    # equal to float precision (the raw score distributions differ in their last digits; a
    # gap, the difference of two near-equal scores on the 1-10 scale, needs an absolute bound)
    # the local run asked for only now: another worker may be building it meanwhile
    local = request.getfixturevalue("run_a")[0]
    for pattern in TABLES:
        a, b = (_tables(w, pattern).drop(columns=["raw"], errors="ignore") for w in (local, work))
        pd.testing.assert_frame_equal(a, b, obj=pattern, check_exact=False, rtol=1e-5, atol=1e-5)

    again = subprocess.run([*cmd, "-n"], cwd=REPO, capture_output=True, text=True, timeout=300, env=slurm.env)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def _minutes(limit: str) -> int:
    """Slurm time limit (D-HH:MM:SS, HH:MM:SS or MM:SS) in minutes."""
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return int(days or 0) * 1440 + h * 60 + m + (s > 0)


def _tables(work, pattern):
    df = read_all(work, pattern).drop(columns="_file")
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


class Faults(threading.Thread):
    """Watches the queue: requeues the first combat job after it has run a few seconds
    (``scontrol requeue``: Slurm starts it again from the beginning, as after a node failure or
    a preemption), then kills the main snakemake with SIGKILL once a dpo job runs (its jobs go
    on without it). Records the jobs it saw, the one it requeued and the ones left running."""

    def __init__(self, cluster: LocalSlurm, main: subprocess.Popen):
        super().__init__(daemon=True)
        self.cluster, self.main = cluster, main
        self.seen: dict[str, dict[str, str]] = {}
        self.requeued: str | None = None
        self.orphans: list[str] = []
        self.done = threading.Event()

    def run(self):
        since: dict[str, float] = {}
        while not self.done.is_set() and self.main.poll() is None:
            for job in self.cluster.jobs():
                self.seen[job["id"]] = job
                if job["state"] != "RUNNING":
                    continue
                since.setdefault(job["id"], time.time())
                if self.requeued is None and job["comment"].startswith("rule_combat_"):
                    if time.time() - since[job["id"]] > 3:
                        self.cluster.run("scontrol", "requeue", job["id"])
                        self.requeued = job["id"]
                elif self.requeued and job["comment"].startswith("rule_dpo_"):
                    self.main.kill()  # SIGKILL: no cleanup, its Slurm jobs go on
                    self.main.wait()
                    self.orphans = [
                        j["id"] for j in self.cluster.jobs() if j["state"] in ("RUNNING", "PENDING")
                    ]
                    return
            time.sleep(0.5)


def test_a_requeued_job_and_a_killed_main_snakemake_lose_nothing(slurm, tiny_base, tmp_path, request):
    """On the real Slurm: a combat job requeued while it runs, then the main snakemake killed
    with SIGKILL while a dpo job runs, then the documented resume (the same command). The
    requeued job reran from the start; the dead snakemake's jobs still queued or running are
    found by the resume and cancelled before it submits anything (never two copies writing one
    file); every table equals the local run's."""
    final = {"checkpoints": "final", "select_from": "final"}
    cfg = write_config(tmp_path, tiny_config(tiny_base, iterations=1, fanout="member", evaluation=final))
    work = tmp_path / "work"
    cmd = [sys.executable, "-m", "snakemake", "--profile", "slurm", "--workflow-profile"]
    cmd += [str(REPO / "tests" / "slurm" / "profile"), "-d", str(work), "--configfile", str(cfg)]
    env = {**slurm.env, "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "first.log", "w")
    main = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    faults = Faults(slurm, main)
    faults.start()
    faults.join(timeout=1500)
    faults.done.set()
    if main.poll() is None:
        main.kill()
    first = (tmp_path / "first.log").read_text()
    assert faults.requeued, "no combat job was seen running long enough to requeue\n" + first[-3000:]
    assert faults.orphans, "the main snakemake was not killed while its jobs ran\n" + first[-3000:]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    states = {j["id"]: j["state"] for j in slurm.jobs()}
    # each job the dead snakemake left: cancelled by the resume (said, with its id), or it
    # ended on its own before the resume looked; never a second copy beside it
    assert all(states.get(j) in ("CANCELLED", "COMPLETED") for j in faults.orphans), (faults.orphans, states)
    for job in faults.orphans:
        if states.get(job) == "CANCELLED":
            assert "still queued or running" in out and f"{job} " in out, out[-4000:]
    local = request.getfixturevalue("run_a")[0]
    for pattern in TABLES:
        a, b = (_tables(w, pattern).drop(columns=["raw"], errors="ignore") for w in (local, work))
        pd.testing.assert_frame_equal(a, b, obj=pattern, check_exact=False, rtol=1e-5, atol=1e-5)


def test_a_request_past_the_partition_s_limit_stops_before_submission(slurm, tiny_base, tmp_path):
    """The partition's MaxTime (scontrol, read when the run starts) below a stage's first
    attempt (dpo's 120 minutes, the default): the run stops before it submits a job, naming
    the stage, the limit and the partition."""
    cfg = write_config(tmp_path, tiny_config(tiny_base, iterations=1))  # dpo: 120 min, the rest 60
    cmd = [sys.executable, "-m", "snakemake", "--profile", "slurm", "--workflow-profile"]
    cmd += [str(REPO / "tests" / "slurm" / "profile"), "-d", str(tmp_path / "work"), "--configfile", str(cfg)]
    before = set(j["id"] for j in slurm.jobs())
    slurm.run("scontrol", "update", f"PartitionName={slurm.partition}", "MaxTime=90")
    try:
        # no partition named: the cluster's default partition (its block in scontrol's answer)
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=slurm.env)
    finally:
        slurm.run("scontrol", "update", f"PartitionName={slurm.partition}", "MaxTime=INFINITE")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"rule dpo asks for 120 min, more than the limit of 90 min in partition {slurm.partition}" in out
    assert set(j["id"] for j in slurm.jobs()) == before  # nothing submitted


# A DPO job given a 1-minute limit, its first attempt stopped (SIGSTOP, as a node too slow for
# the limit would leave it) once it has saved its progress, so Slurm ends it (TIMEOUT: Slurm
# checks limits about every 30 s, so 60-95 s after it started) whatever the machine's speed;
# each retry gets a 30-minute limit from the test (the profile's retry asks for 2, then 3
# minutes: on a slow machine too little for any outcome to be sure). A random model of 6
# layers of width 1024, 5 epochs of its pairs (12 in expected mode: 60 steps), a progress
# save every 6 s.
TIMEOUT_MODEL = {"hidden": 1024, "layers": 6}
DPO_SAVE_MINUTES = 0.1


def _runs_a_rule_script(pid: int) -> bool:
    try:
        return b".snakemake/scripts/" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class SlowFirstAttempt(threading.Thread):
    """Watches the queue for jobs of ``rule``: the first one's script is stopped (SIGSTOP) once
    a progress save exists in ``saves``; every later one gets a 30-minute limit (as root, as a
    cluster's administrator can)."""

    def __init__(self, cluster: LocalSlurm, rule: str, before: set[str], saves: Path):
        super().__init__(daemon=True)
        self.cluster, self.rule, self.before, self.saves = cluster, rule, before, saves
        self.first: str | None = None
        self.stopped: list[int] = []
        self.lifted: set[str] = set()
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            for job in self.cluster.jobs():
                if job["id"] in self.before or not job["comment"].startswith(f"rule_{self.rule}_"):
                    continue
                self.first = self.first or job["id"]
                if job["id"] == self.first and not self.stopped and job["state"] == "RUNNING":
                    if any(self.saves.glob("checkpoint-*/trainer_state.json")):
                        for pid in filter(_runs_a_rule_script, processes_of(job["id"])):
                            os.kill(pid, signal.SIGSTOP)
                            self.stopped.append(pid)
                elif job["id"] != self.first and job["id"] not in self.lifted:
                    self.cluster.run("scontrol", "update", f"JobId={job['id']}", "TimeLimit=30", check=False)
                    self.lifted.add(job["id"])
            time.sleep(0.5)


def test_a_dpo_job_past_its_time_limit_continues_from_its_progress(slurm, tmp_path):
    """On the real Slurm: one member's DPO job with a 1-minute limit and more work than fits.
    Slurm ends it (TIMEOUT) after its progress saves; the profile's retry continues from the
    last save; nothing of the ended attempt runs on; the member's training log has every step
    once, and its adapter is bit for bit the one an uninterrupted run without Slurm trains."""
    from .tiny import build_tiny_model

    base = build_tiny_model(tmp_path / "model", **TIMEOUT_MODEL)
    cfg = tiny_config(
        base,
        iterations=1,
        members=[{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")],  # no SFT
        dpo_fanout="member",
        prompts={"per_iteration": 12},
        dpo={"learning_rate": 1.0e-3, "max_length": 256, "epochs": 5, "save_minutes": DPO_SAVE_MINUTES},
        resources={"dpo": {"gpu": 0, "runtime": 1, "mem_mb": 1500}},
        evaluation={"enabled": False},
    )
    path = write_config(tmp_path, cfg)
    target = f"{EXP}/iter_1/members/ann/member.json"
    cmd = [sys.executable, "-m", "snakemake", target, "--profile", "slurm", "--workflow-profile"]
    cmd += [
        str(REPO / "tests" / "slurm" / "profile"),
        "-d",
        str(tmp_path / "work"),
        "--configfile",
        str(path),
    ]
    before = {j["id"] for j in slurm.jobs()}
    saves = tmp_path / "work" / EXP / "iter_1" / "members" / "ann" / "trainer"
    lifter = SlowFirstAttempt(slurm, "dpo", before, saves)
    lifter.start()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200, env=slurm.env)
    finally:
        lifter.done.set()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    jobs = [j for j in slurm.jobs() if j["id"] not in before and j["comment"].startswith("rule_dpo_")]
    jobs.sort(key=lambda j: int(j["id"]))
    states = [j["state"] for j in jobs]
    assert lifter.stopped, "the first attempt was not seen running with a progress save"
    assert states == ["TIMEOUT", "COMPLETED"], (states, out[-3000:])
    # the timed-out attempt left nothing running (a copy beside its retry would write its files)
    assert not processes_of(jobs[0]["id"]), "a process of the timed-out job still runs"
    work = tmp_path / "work"
    # the job's log: the last attempt's (each attempt writes it anew; Slurm's own logs of a job
    # that succeeded are removed by the executor)
    log = (work / EXP / "logs" / "iter_1" / "dpo_ann.log").read_text(errors="replace")
    assert "ann: continuing from the progress saved in" in log, log[-3000:]
    history = read_all(work, f"{EXP}/iter_1/members/ann/training_log.parquet")
    steps = history[history["loss"].notna()]["step"].astype(int).tolist()
    assert steps == list(range(1, len(steps) + 1)), steps  # every step logged once, in order
    # the same run without Slurm and without interruption (one thread a job, as on the test
    # node): the same pairs, and the resumed adapter bit for bit
    local = tmp_path / "local"
    cmd = [sys.executable, "-m", "snakemake", target, "-d", str(local), "--configfile", str(path)]
    cmd += ["--cores", "1", "--set-threads", *(f"{r}=1" for r in ("combat", "judge", "dpo"))]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    pairs = f"{EXP}/iter_1/preferences.parquet"
    pd.testing.assert_frame_equal(read_all(work, pairs), read_all(local, pairs))
    from safetensors.torch import load_file

    adapter = f"{EXP}/iter_1/members/ann/adapter/adapter_model.safetensors"
    resumed, whole = load_file(work / adapter), load_file(local / adapter)
    assert resumed.keys() == whole.keys()
    assert all(resumed[k].equal(whole[k]) for k in whole), "the resumed adapter differs"
