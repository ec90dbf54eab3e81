"""The whole workflow on tiny random models: outputs, determinism, resumption, bad input,
unparseable judges. Each run is a real `snakemake` process over the real rules."""

import os
import re
import shutil
import signal
import subprocess
import time

import pandas as pd
import pytest
import torch

from .workflow_helpers import read_all, run_snakemake, snakemake_cmd, tiny_config, write_config

pytestmark = pytest.mark.slow
EXP = "results/tiny"
ROUND_TABLES = [
    f"{EXP}/iter_*/round_*/{name}.parquet"
    for name in ("duels", "responses/*", "judgments/*", "history", "state", "preferences")
] + [
    f"{EXP}/iter_*/preferences.parquet",
    f"{EXP}/reputation_history.parquet",
    f"{EXP}/final_state.parquet",
    f"{EXP}/evaluation/checkpoint_*/*.parquet",
]


@pytest.fixture(scope="module")
def run_b(tmp_path_factory, tiny_base):
    """The same experiment killed hard (kill -9 of the whole snakemake process group, as a node
    failure would) in the middle of iteration 1's judging, then recovered with the same
    command. Its tables must equal run_a's byte for byte: the kill may change nothing. One
    iteration (run_a has two): iteration 1 is the same in both. Both commands ask for the run up
    to iteration 1's preferences and standings and the initial pool's evaluation: the kill and
    the recovery happen before any DPO, and a DPO, a later evaluation and the analysis after the
    recovery would only cost model jobs (their tables' equality is run_a's and test_slurm's)."""
    root = tmp_path_factory.mktemp("run_b")
    cfg = write_config(root, tiny_config(tiny_base, iterations=1))
    work = root / "work"
    targets = [f"{EXP}/iter_1/preferences.parquet", f"{EXP}/final_state.parquet"]
    targets += [f"{EXP}/evaluation/checkpoint_0/{m}.parquet" for m in ("ann", "bob", "cid")]
    log = open(root / "first.log", "w")
    proc = subprocess.Popen(
        snakemake_cmd(work, cfg, *targets), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.time() + 900
    judging = work / EXP / "logs" / "iter_1" / "round_0" / "judge_pool.log"
    while time.time() < deadline and proc.poll() is None:
        if judging.is_file():
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    time.sleep(1.0)  # the judge job is loading or judging
    os.killpg(proc.pid, signal.SIGKILL)
    first_rc = proc.wait(timeout=60)
    log.close()
    assert not (work / EXP / "iter_1" / "round_0" / "history.parquet").exists(), "killed too late"
    finished = {
        p: p.stat().st_mtime_ns for p in (work / "results").rglob("*") if p.suffix in (".parquet", ".json")
    }
    second = run_snakemake(work, cfg, *targets)  # the recovery: the same command
    return work, first_rc, finished, second


def _tables(work, pattern):
    df = read_all(work, pattern).drop(columns="_file")
    return df.sort_values(list(df.columns[:3])).reset_index(drop=True)


def test_outputs_of_a_whole_run(run_a):
    work, _ = run_a
    history = pd.read_parquet(work / EXP / "reputation_history.parquet")
    assert len(history) == 2 * 6
    assert sorted(history["iteration"].unique()) == [1, 2]
    assert set(history["outcome"]) <= {"a", "b", "tie", "no_verdict"}
    state = pd.read_parquet(work / EXP / "final_state.parquet")
    assert sorted(state["member"]) == ["ann", "bob", "cid"]
    assert (state["judge_weight"] < 1).sum() == 1  # iteration 2 down-weighted one judge
    judgments = read_all(work, f"{EXP}/iter_1/round_*/judgments/*.parquet")
    assert judgments["score"].notna().all()  # expected mode always gives a score
    assert (judgments["judge"] != judgments["target"]).all()
    prefs = read_all(work, f"{EXP}/iter_*/preferences.parquet")
    assert len(prefs) > 0 and (prefs["chosen_member"] != prefs["rejected_member"]).all()
    assert (prefs["chosen_score"] > prefs["rejected_score"]).all()
    kept = history[history["outcome"].isin(["a", "b"])]
    assert sorted(kept["duel_id"]) == sorted(prefs["duel_id"])
    umask = os.umask(0)
    os.umask(umask)
    for table in ("final_state.parquet", "iter_1/round_0/duels.parquet", "evaluation/scores.parquet"):
        assert (work / EXP / table).stat().st_mode & 0o777 == 0o666 & ~umask, table  # not 0600
    for name in (
        "logs/iter_1/round_0/aggregate.log",
        "benchmarks/iter_1/round_0/combat_pool.tsv",
        "benchmarks/iter_2/dpo_pool.tsv",
    ):
        assert (work / EXP / name).is_file(), name


def test_members_chain_and_adapters_are_standard_peft(run_a):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from sparta.models import MemberSpec

    work, _ = run_a
    specs = {t: MemberSpec.read(work / EXP / f"iter_{t}/members/ann/member.json") for t in (0, 1, 2)}
    weights = {t: load_file(f"{specs[t].adapter}/adapter_model.safetensors") for t in (0, 1, 2)}
    assert weights[0].keys() == weights[2].keys()
    moved = [k for k in weights[0] if not torch.equal(weights[0][k], weights[2][k])]
    assert moved, "DPO did not change the adapter"
    base = AutoModelForCausalLM.from_pretrained(specs[2].base)
    model = PeftModel.from_pretrained(base, specs[2].adapter)
    assert set(model.peft_config) == {"default"}  # TRL's frozen "ref" copy is not saved
    fresh = MemberSpec.read(work / EXP / "iter_2/members/cid/member.json")
    assert fresh.adapter is not None  # a member without an adapter gets one from its first DPO


def test_pool_jobs_serve_every_member(run_a):
    """fanout pool: one combat, one judging job per round, one DPO job per iteration and one
    evaluation job per checkpoint, each serving every member (their outputs are per member)."""
    work = run_a[0]
    assert sorted(p.name for p in (work / EXP / "logs/iter_1/round_0").iterdir()) == [
        "aggregate.log",
        "combat_pool.log",
        "judge_pool.log",
        "matchmake.log",
    ]
    assert (work / EXP / "logs/iter_1/dpo_pool.log").is_file()
    assert (work / EXP / "logs/evaluation/checkpoint_2/evaluate_pool.log").is_file()
    responses = read_all(work, f"{EXP}/iter_1/round_0/responses/*.parquet")
    assert responses.groupby("_file")["member"].nunique().eq(1).all()  # one member per file


def test_recovery_after_kill_9_reruns_nothing_finished(run_a, run_b):
    work, first_rc, finished, second = run_b
    assert first_rc == -signal.SIGKILL
    assert "removed the locks of a snakemake that died" in second.stderr
    done = [p.relative_to(work).as_posix() for p in finished]
    assert any("iter_0/members" in p for p in done) and any("iter_1/round_0/duels" in p for p in done)
    for path, mtime in finished.items():
        assert path.stat().st_mtime_ns == mtime, f"{path} was rewritten on resume"
    assert (work / EXP / "final_state.parquet").is_file()
    run_level = ("reputation_history.parquet", "final_state.parquet")  # 1 iteration vs 2
    for pattern in ROUND_TABLES:
        if pattern.endswith(run_level):
            continue
        files = sorted(work.glob(pattern))
        assert files, pattern
        for b in files:
            a = run_a[0] / b.relative_to(work)
            assert a.read_bytes() == b.read_bytes(), (
                f"{b.relative_to(work)} differs from the uninterrupted run"
            )


def test_unparseable_judges_give_null_scores_and_the_run_goes_on(tmp_path, tiny_base):
    """Also the path with two rounds per iteration: round 1 is matched on round 0's state."""
    cfg = tiny_config(
        tiny_base,
        "garbled",
        # one job per stage and round (fanout member, the cluster default, runs in
        # tests/test_slurm.py, its tables equal to the pooled run's)
        fanout="pool",
        iterations=1,
        judge={"mode": "generate", "max_new_tokens": 6},
        members=[{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")],
        matchmaking={"rounds_per_iteration": 2},
        prompts={"per_iteration": 4},
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    # up to the standings and the iteration's preferences: no assertion needs its DPO
    targets = [f"results/garbled/{name}" for name in ("final_state.parquet", "iter_1/preferences.parquet")]
    run_snakemake(tmp_path / "work", write_config(tmp_path, cfg), *targets)
    out = tmp_path / "work" / "results" / "garbled"
    judgments = read_all(tmp_path / "work", "results/garbled/iter_1/round_0/judgments/*.parquet")
    nulls = judgments["score"].isna()
    assert nulls.sum() > 0 and judgments.loc[nulls, "error"].notna().all()
    assert (judgments["raw"] != "").any()
    log = (out / "logs/iter_1/round_0/aggregate.log").read_text()
    assert "judgments unusable" in log
    judge_logs = " ".join(p.read_text() for p in (out / "logs/iter_1/round_0").glob("judge_*.log"))
    assert "had no usable score" in judge_logs
    history = pd.read_parquet(out / "reputation_history.parquet")
    assert sorted(history["round"].unique()) == [0, 1] and len(history) == 4
    assert (out / "final_state.parquet").is_file()
    # round 0: rule aggregate_round; the last round's aggregation also writes the iteration's
    # preference set, both rounds' pairs in order
    rounds = [pd.read_parquet(out / f"iter_1/round_{r}/preferences.parquet") for r in (0, 1)]
    every = pd.read_parquet(out / "iter_1/preferences.parquet")
    pd.testing.assert_frame_equal(every, pd.concat(rounds, ignore_index=True))
    assert (out / "logs/iter_1/round_1/aggregate.log").is_file()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"base_models": {"tiny": {"path": "/no/such/model"}}}, "base_models.tiny.path"),
        ({"iteratons": 3}, "iteratons"),
        ({"judge": {"mode": "pairwise"}}, "pairwise"),
        ({"prompts": {"prompt_column": "question"}}, "no column 'question'"),
        ({"prompts": {"file": "EMPTY"}}, "is empty"),
        (
            {"members": [{"name": "ann", "base": "tiny"}, {"name": "bob", "base": "tiny"}]},
            "at least 3 members",
        ),
    ],
)
def test_bad_input_fails_before_any_job(tmp_path, tiny_base, change, message):
    cfg = tiny_config(tiny_base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    if cfg["prompts"]["file"] == "EMPTY":
        (tmp_path / "empty.jsonl").write_text("")
        cfg["prompts"]["file"] = str(tmp_path / "empty.jsonl")
    proc = run_snakemake(tmp_path / "work", write_config(tmp_path, cfg), check=False, timeout=300)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "work" / "results").exists()


def _planned_jobs(work, cfg) -> set[tuple[str, str]]:
    """(rule, iteration) of every job a dry run would run."""
    proc = run_snakemake(work, cfg, "-n")
    jobs = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            t = re.search(r"wildcards:.*\bt=(\d+)", block)
            jobs.add((m.group(1), t.group(1) if t else "-"))
    return jobs


def test_editing_a_setting_reruns_only_what_it_can_change(run_a, tiny_base, tmp_path):
    """Each rule gets only the settings it uses: a new reputation.scale re-aggregates
    iteration 1 (and what follows from it) but keeps its duels, answers and judgments. The run
    is finished, so a changed setting plans only with replace_finished (sparta/finished.py)."""
    work, _ = run_a
    stopped = run_snakemake(
        work,
        write_config(tmp_path / "ask", tiny_config(tiny_base, reputation={"scale": 7.0})),
        "-n",
        check=False,
    )
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0 and "reputation.scale: 20.0 -> 7.0" in said, said[-3000:]
    scale = _planned_jobs(
        work,
        write_config(
            tmp_path / "scale", tiny_config(tiny_base, reputation={"scale": 7.0}, replace_finished=True)
        ),
    )
    assert ("aggregate", "1") in scale and ("dpo", "1") in scale
    assert not {("matchmake", "1"), ("combat", "1"), ("judge", "1")} & scale, sorted(scale)
    assert not {r for r, _ in scale} & {"split_prompts", "init_state", "sft_member", "init_member"}
    tokens = _planned_jobs(
        work,
        write_config(
            tmp_path / "gen", tiny_config(tiny_base, generation={"max_new_tokens": 9}, replace_finished=True)
        ),
    )
    assert ("combat", "1") in tokens and ("matchmake", "1") not in tokens
    same = _planned_jobs(work, write_config(tmp_path / "same", tiny_config(tiny_base)))
    assert same == set(), sorted(same)


def test_a_damaged_run_fails_with_the_file_named_then_rebuilds_exactly(run_a, tmp_path, capsys):
    """A judgments table without its score column makes iteration 2's aggregation fail; its
    log ends with the file to fix, and that job's finished outputs are kept. Once the bad
    file is deleted (and a finished member's weights too), the same command rebuilds exactly
    what is missing: every table and adapter equals the undamaged run's, byte for byte."""
    from sparta.cli import main
    from sparta.engine import integrity

    work = tmp_path / "work"
    shutil.copytree(run_a[0], work, symlinks=True)
    cfg = run_a[0].parent / "config.yaml"
    rnd = work / EXP / "iter_2" / "round_0"
    bad = rnd / "judgments" / "ann.parquet"
    pd.read_parquet(bad).drop(columns="score").to_parquet(bad)
    # as if the bad table had been written so by its job (else the start's integrity check
    # finds it damaged and rebuilds it: tests/test_integrity.py)
    integrity.record(work / ".snakemake", str(bad.relative_to(work)), workdir=work)
    proc = run_snakemake(work, cfg, check=False)
    assert proc.returncode != 0
    log = [
        line for line in (work / EXP / "logs/iter_2/round_0/aggregate.log").read_text().splitlines() if line
    ]
    assert "judgments/ann.parquet is not a judgments table: missing column(s) ['score']" in log[-1], log[-3:]
    assert "Traceback" in "\n".join(log)
    # the failed job's previous outputs are back, unchanged (sparta/engine/keep.py)
    finished = run_a[0] / (rnd / "state.parquet").relative_to(work)
    assert (rnd / "state.parquet").read_bytes() == finished.read_bytes()
    (rnd / "state.parquet").unlink()
    assert main(["standings", str(work / EXP)]) == 0
    assert "iter_2/round_0 has no state.parquet" in capsys.readouterr().err

    bad.unlink()
    weights = work / EXP / "iter_2/members/bob/adapter/adapter_model.safetensors"  # retrained with the rest
    weights.unlink()
    run_snakemake(work, cfg)
    for pattern in [*ROUND_TABLES, f"{EXP}/iter_*/members/*/adapter/adapter_model.safetensors"]:
        for a in sorted(run_a[0].glob(pattern)):
            b = work / a.relative_to(run_a[0])
            assert b.is_file() and a.read_bytes() == b.read_bytes(), (
                f"{b.relative_to(work)} was not rebuilt exactly"
            )


def test_a_deleted_file_no_job_reads_is_planned_again(run_a, tmp_path):
    """Rule all asks for each run's last files only (rules/common.smk, target_of): an
    earlier checkpoint's adapter, which no later job reads (they read its member.json), is
    still rebuilt when deleted, by its DPO job, with what depends on it; the intact run plans
    nothing."""
    work = tmp_path / "work"
    shutil.copytree(run_a[0], work, symlinks=True)
    cfg = run_a[0].parent / "config.yaml"
    assert "Nothing to be done" in run_snakemake(work, cfg, "-n").stdout
    weights = f"{EXP}/iter_1/members/cid/adapter/adapter_model.safetensors"
    (work / weights).unlink()
    plan = run_snakemake(work, cfg, "-n").stdout
    assert re.search(rf"reason: Missing output files: .*{re.escape(weights)}", plan), plan[-3000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", plan, flags=re.M))
    # iteration 1's DPO, then iteration 2 (fanout pool: one job per stage)
    assert jobs["dpo"] == "2" and jobs["combat"] == jobs["judge"] == "1", jobs


def test_cli_names_a_damaged_table_in_one_line(run_a, tmp_path, capsys):
    from sparta.cli import main

    run = tmp_path / "tiny"
    shutil.copytree(run_a[0] / EXP, run)
    (run / "iter_1" / "preferences.parquet").write_bytes(b"")
    (run / "iter_1" / "round_0" / "duels.parquet").write_bytes(b"not parquet")
    for argv in (["pairs", str(run / "iter_1")], ["show", "t01-00000", "--run", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert ".parquet is not a readable Parquet" in err and "rerun snakemake" in err, err


def test_cli_on_a_finished_run(run_a, capsys):
    import json

    from sparta.cli import main

    work, _ = run_a
    run = work / EXP
    assert main(["pairs", str(run / "iter_1"), "--json"]) == 0
    pairs = json.loads(capsys.readouterr().out)
    prefs = pd.read_parquet(run / "iter_1" / "preferences.parquet")
    assert len(pairs) == len(prefs) and {"disagreement", "chosen", "margin"} <= set(pairs[0])
    member = prefs["chosen_member"].iloc[0]
    assert main(["pairs", str(run / "iter_1"), "--member", member, "--min-margin", "0"]) == 0
    assert member in capsys.readouterr().out
    assert main(["standings", str(run), "--json"]) == 0
    standings = json.loads(capsys.readouterr().out)
    assert {s["member"] for s in standings} == {"ann", "bob", "cid"}
    duel = prefs["duel_id"].iloc[0]
    assert main(["show", duel, "--run", str(run), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["duel_id"] == duel and shown["judgments"] and shown["outcome"] in ("a", "b")
    assert main(["show", duel, "--run", str(run)]) == 0
    assert "judge" in capsys.readouterr().out
    bad = [
        ["pairs", str(run / "iter_9")],
        ["pairs", "/no/such/dir"],
        ["standings", str(work)],
        ["show", "t07-00001", "--run", str(run)],
        ["show", "nonsense", "--run", str(run)],
        ["pairs", str(run / "iter_1"), "--member", "nobody"],
        ["pairs", str(run / "iter_1"), "--trainee", "nobody"],
    ]
    for argv in bad:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "its members: ann, bob, cid" in err
    # `sparta pairs ... | head`: a reader that has gone away is no error (a pipe already closed)
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [sys.executable, "-m", "sparta.cli", "pairs", str(run / "iter_1")],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()


def test_report_outputs(run_a):
    work, _ = run_a
    for name in (
        "reputation",
        "win_matrix",
        "judge_scores",
        "label_accuracy",
        "diversity",
        "reward_hacking",
        "training",
        "evaluation",
    ):
        png = work / EXP / "report" / f"{name}.png"
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG", name
    selection = pd.read_csv(work / EXP / "evaluation" / "selection.tsv", sep="\t")
    assert set(selection["stage"]) == {"best initial", "best final", "selected"}
    scores = pd.read_parquet(work / EXP / "evaluation" / "scores.parquet")
    assert set(scores["checkpoint"]) == {0, 1, 2} and set(scores["split"]) == {"validation", "test"}
    label = pd.read_parquet(work / EXP / "analysis" / "label_accuracy.parquet")
    assert "overall" in set(label["scope"])
