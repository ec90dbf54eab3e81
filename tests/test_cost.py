"""The cost model (``python -m sparta.cost``): token counts of a tiny config counted by hand,
and the paper's configs printed with every stage."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from sparta import cost, workload
from sparta.methods import METHODS
from sparta.study import merge

from .workflow_helpers import REPO

BASE = REPO / "config.yaml"


def tiny(tmp_path, fill: float = 1.0, **overlay) -> list[cost.RunCost]:
    """The costs of a tiny config merged over config.yaml: 3 members, 2 iterations of 4
    prompts, answers of at most 8 tokens, expected-mode judges, no system prompt; its prompt
    file holds 20 distinct prompts of 80 characters (20 tokens each); one evaluation task on
    the run's own splits, answers of at most 6 tokens."""
    rows = [{"prompt_id": f"p{i}", "prompt": f"{i:02d}" + "x" * 78, "answer": str(i)} for i in range(20)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {
        "experiment": "tiny-cost",
        "iterations": 2,
        "system_prompt": None,
        "members": [{"name": n, "base": "smollm2"} for n in ("a", "b", "c")],
        "prompts": {"file": "prompts.jsonl", "validation": 0.2, "test": 0.2, "per_iteration": 4},
        "generation": {"max_new_tokens": 8},
        "judge": {"mode": "expected", "max_length": 512, "max_new_tokens": 5},
        "evaluation": {"tasks": [{"name": "arith", "source": "prompts", "max_new_tokens": 6}]},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(merge(config, overlay)))
    return cost.study_costs(cost.read_config([path], BASE), cost.Assumptions(fill, root=tmp_path))


def per_iteration(run: cost.RunCost, stage: str, t: int = 1) -> tuple[int, int, int]:
    tok = run.stages[stage][t]
    return tok.generated, tok.read, tok.trained


def test_the_judge_prompts_own_text():
    """Sparta's judge prompt without prompt and answer is 368 characters: 92 tokens at 4 a
    token; the pairwise one 352 characters: 88; the meta-judge's 377: 95."""
    t = workload.templates()
    assert (t["sparta"], t["pairwise"], t["meta"]) == (92, 88, 95)


def test_sparta_counted_by_hand(tmp_path):
    """A request's chat template adds 12 tokens (no system prompt); a prompt is 20 tokens, an
    answer 8. The split keeps 20 - 4 - 4 = 12 prompts for alignment: 4 duels an iteration.

    combat: 2 answers a duel, 8 answers: 8 x 8 = 64 generated, 8 x (12 + 20) = 256 read.
    cross-judging: 3 - 2 = 1 judge per duel scores both answers: 8 judgments, each reading
    12 + 92 (judge prompt) + 20 + 8 = 132 tokens: 1,056 read, nothing generated (expected).
    DPO: at most 4 pairs, each member trains on every one: 12 x 2 sequences x (12 + 20 + 8)
    = 960 trained. evaluation at checkpoints 0, 1 and 2: 3 members x (4 validation + 4 test)
    = 24 answers, 24 x 6 = 144 generated, 24 x (20 + 12) = 768 read.
    Run: 2 x 64 + 3 x 144 = 560 generated, 2 x (256 + 1,056) + 3 x 768 = 4,928 read, 1,920
    trained."""
    (run,) = tiny(tmp_path)
    assert run.prompts == 4 and run.size == "135M" and run.backend == "hf"
    assert list(run.stages) == [
        "combat generation",
        "cross-judging",
        "aggregation",
        "DPO training",
        "evaluation",
    ]
    assert per_iteration(run, "combat generation") == (64, 256, 0)
    assert per_iteration(run, "cross-judging") == (0, 1056, 0)
    assert per_iteration(run, "aggregation") == (0, 0, 0)
    assert per_iteration(run, "DPO training") == (0, 0, 960)
    assert sorted(run.stages["evaluation"]) == [0, 1, 2]
    assert per_iteration(run, "evaluation", 0) == (144, 768, 0)
    assert run.total() == cost.Tokens(560, 4928, 1920)
    # GPU-hours: each kind of token at its own rate
    r = run.rates
    seconds = 4928 / r["read"].tokens_per_s + 560 / r["decode"].tokens_per_s + 1920 / r["train"].tokens_per_s
    assert run.hours(run.total()) == pytest.approx(seconds / 3600)


def test_generate_mode_judges_write_their_judgments(tmp_path):
    """judge.mode generate: each of the 8 judgments writes up to judge.max_new_tokens 5: 40
    generated; --fill 0.5 halves answers (4 tokens) and judgments (round(2.5) = 2)."""
    (run,) = tiny(tmp_path, judge={"mode": "generate", "max_new_tokens": 5})
    assert per_iteration(run, "cross-judging") == (40, 1056, 0)
    (half,) = tiny(tmp_path, 0.5, judge={"mode": "generate", "max_new_tokens": 5})
    assert per_iteration(half, "combat generation") == (8 * 4, 256, 0)
    assert per_iteration(half, "cross-judging") == (8 * 2, 8 * (12 + 92 + 20 + 4), 0)


def test_vllm_scoring_counts_each_candidate_prefix(tmp_path):
    """backend vllm: each of the 8 pointwise judgments (132 tokens) adds 10 candidate-prefix
    requests, each computing the prompt's last partial block of 16 (132 % 16 = 4) and its own
    token: 132 + 10 x 5 = 182 each; in generate mode nothing is scored."""
    (run,) = tiny(tmp_path, backend="vllm")
    assert per_iteration(run, "cross-judging") == (0, 8 * 182, 0)
    assert per_iteration(run, "combat generation") == (64, 256, 0)
    (generated,) = tiny(tmp_path, backend="vllm", judge={"mode": "generate"})
    assert per_iteration(generated, "cross-judging") == (40, 1056, 0)
    # pairwise: 8 requests (4 duels, both orders) of 136 tokens, 2 prefixes (A, B): 136 + 2 x 9
    (pairs,) = tiny(tmp_path, backend="vllm", judge={"format": "pairwise"})
    assert per_iteration(pairs, "cross-judging") == (0, 8 * 154, 0)


@pytest.mark.parametrize(
    ("method", "baselines", "expected"),
    [
        # 3 members x 4 prompts x 2 samples = 24 answers: 192 generated, 24 x 32 = 768 read;
        # each member judges its 24 answers alone: 24 x 132 = 3,168 read; each trains on at
        # most its 4 pairs: 12 x 80 = 960
        (
            "self_rewarding",
            {"samples": 2, "judge_prompt": "sparta"},
            {"sampling": (192, 768, 0), "self-judging": (0, 3168, 0), "DPO training": (0, 0, 960)},
        ),
        # meta-judging: at most 3 x 4 = 12 answers re-judged, each by N = 3 judgments sampled
        # anew (expected mode): 36 x 5 = 180 generated, 36 x 132 = 4,752 read; then 3 x 2 = 6
        # comparisons each, reading 12 + 95 + (132 - 12) + 2 x 5 = 237: 72 x 237 = 17,064;
        # judge pairs: floor(0.15 x 4 / 0.85) = 0 per member
        (
            "meta_rewarding",
            {"samples": 2, "judge_prompt": "sparta"},
            {"meta-judging": (180, 4752 + 17064, 0), "DPO training": (0, 0, 960)},
        ),
        # 3 answers per prompt: 36 answers; every two compared in both orders: 3 x 4 x 3 x 2 =
        # 72 requests reading 12 + 88 + 20 + 2 x 8 = 136: 9,792
        (
            "sppo",
            {"samples": 3},
            {"sampling": (288, 1152, 0), "pairwise annotation": (0, 9792, 0)},
        ),
        # one answer per member and prompt, no judging; iteration 2 trains on the pairs of
        # iterations 1 and 2 (history 2)
        ("spin", {}, {"sampling": (96, 384, 0), "DPO training": (0, 0, 960)}),
    ],
)
def test_baselines_counted_by_hand(tmp_path, method, baselines, expected):
    """Each baseline's stages at iteration 1 (the tiny config's lengths, see
    :func:`test_sparta_counted_by_hand`)."""
    (run,) = tiny(tmp_path, method=method, baselines=baselines, prompts={"reference_column": "answer"})
    for stage, figures in expected.items():
        assert per_iteration(run, stage) == figures, stage
    if method == "spin":
        assert per_iteration(run, "DPO training", 2) == (0, 0, 1920)


def test_every_method_has_its_stages():
    assert set(cost.GENERATING) == set(METHODS)


def test_every_rate_is_measured_with_its_date_or_an_assumption():
    for r in cost.RATES:
        assert r.status in ("measured", "assumption"), r
        if r.status == "measured":  # its date, commit and machine (the GPU, or the CPU's features)
            assert re.search(r"\d{4}-\d{2}-\d{2}, commit [0-9a-f]{7}", r.source), r
            assert r.device in r.source or ("cores of an" in r.source and "AVX" in r.source), r
        assert r.size in cost.SIZES and r.tokens_per_s > 0


def test_size_classes_from_model_names():
    assert cost.parameters("hf://Qwen/Qwen2.5-7B-Instruct") == 7e9
    assert cost.parameters("SmolLM2-135M-Instruct.Q4_1.gguf") == 135e6
    assert cost.parameters("models/my-model") is None


def test_the_paper_config_prints_every_stage(capsys):
    assert cost.main(["--base", str(BASE), str(REPO / "workflow/configs/paper.yaml")]) == 0
    out = capsys.readouterr().out
    for stage in ("combat generation", "cross-judging", "aggregation", "DPO training"):
        assert re.search(rf"^  {stage} +1-8 each", out, re.M), stage
    assert re.search(r"^  evaluation +0-8 each", out, re.M)  # the initial pool, then each iteration
    assert "10 members, 8 iterations x 1,000 prompts; 7B class" in out
    assert re.search(r"^all 1 run: .* GPU-hours$", out, re.M)
    assert "assumption: vLLM" in out and "assumptions:" in out
    # 2,000 answers of 512 tokens; 8 judges x 2 answers x 1,000 duels of 256 tokens each
    assert re.search(r"combat generation +1-8 each +1,024,000 ", out)
    assert re.search(r"cross-judging +1-8 each +4,096,000 ", out)


def test_the_embedded_default_on_a_cpu_at_rates_measured_there(capsys):
    assert cost.main(["--base", str(BASE), str(BASE), "--device", "CPU"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^all 1 run: .* CPU-hours$", out, re.M) and "CPU-h" in out
    used = re.findall(r"^  (decode|read|train) +135M (hf|trl) +CPU .* measured: (.*)$", out, re.M)
    assert sorted(k for k, _, _ in used) == ["decode", "read", "train"]
    assert all("cores of an" in source for _, _, source in used)


def test_a_study_prints_the_baselines_stages_and_json(capsys):
    args = ["--base", str(BASE), str(REPO / "workflow/configs/study-small.yaml")]
    assert cost.main(args) == 0
    out = capsys.readouterr().out
    for stage in ("sampling", "self-judging", "meta-judging", "pairwise annotation"):
        assert re.search(rf"^  {stage} ", out, re.M), stage
    assert "study-small/_init; seeds 1, 2 (2 runs, each)" in out and "measured:" in out
    assert cost.main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 12 and data["total"]["gpu_hours"] > 0
    assert {r["status"] for r in data["rates"]} == {"measured"}


def test_a_missing_config_is_named(capsys):
    assert cost.main(["--base", str(BASE), "no-such.yaml"]) == 2
    assert "no such config file: no-such.yaml" in capsys.readouterr().err
