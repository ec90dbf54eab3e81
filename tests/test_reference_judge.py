"""The reference judge (judge.kind: reference), the positive control: answers checked against
their prompts' answers, no model judging, every table as usual."""

import json

import pytest

from sparta import config as sparta_config
from sparta import tables
from sparta.judging import reference_judgment, reference_win_probability
from sparta.metrics import exact_match

from .workflow_helpers import run_snakemake, tiny_config, write_config


def test_right_scores_10_wrong_1_and_no_answer_is_recorded():
    right = reference_judgment("3 + 4 = 7. The answer is 7.", "7")
    wrong = reference_judgment("The answer is 8.", "7")
    none = reference_judgment("The answer is 8.", None)
    assert (right.score, wrong.score) == (10.0, 1.0)
    assert json.loads(right.raw)["right"] is True and right.error is None
    assert none.score is None and "no reference answer" in none.error
    assert reference_judgment("\\boxed{x+1}", "x + 1", "boxed").score == 10.0


def test_win_probability_from_two_reference_scores():
    assert reference_win_probability(10.0, 1.0) == 1.0
    assert reference_win_probability(1.0, 10.0) == 0.0
    assert reference_win_probability(10.0, 10.0) == reference_win_probability(1.0, 1.0) == 0.5
    assert reference_win_probability(None, 10.0) == 0.5


@pytest.mark.parametrize(
    "change, message",
    [
        ({"method": "spin", "prompts": {"reference_column": "solution"}}, "SPIN does not judge"),
        ({"method": "meta_rewarding"}, "meta-judge"),
        ({"prompts": {"answer_column": None}}, "prompts.answer_column"),
    ],
)
def test_reference_judge_needs_answers_and_a_judging_method(tiny_base, change, message):
    cfg = tiny_config(tiny_base, judge={"kind": "reference"}, **change)
    with pytest.raises(sparta_config.ConfigError, match=message):
        sparta_config.load_study(cfg, ".")


@pytest.mark.slow
def test_reference_judged_runs_of_sparta_self_rewarding_and_sppo(tmp_path, tiny_base):
    cfg = tiny_config(
        tiny_base,
        "tiny-ref",
        iterations=1,
        prompts={"per_iteration": 3},
        judge={"kind": "reference"},
        baselines={"samples": 2},
        # no SFT and no analysis: no assertion reads them (a member's DPO still saves an
        # adapter, trained or, without pairs, a fresh LoRA: sparta/train.py, dpo_members)
        members=[{"name": n, "base": "tiny"} for n in ("ann", "bob", "cid")],
        evaluation={"enabled": False},
        analysis={"enabled": False},
    )
    cfg["study"] = {
        "seeds": [3],
        "experiments": {m: {"method": m} for m in ("sparta", "self_rewarding", "sppo")},
    }
    run_snakemake(tmp_path / "work", write_config(tmp_path, cfg), timeout=2400)
    out = tmp_path / "work" / "results" / "tiny-ref"
    for method in ("sparta", "self_rewarding", "sppo"):
        run = out / f"{method}-seed3"
        duels = tables.read(run / "iter_1/round_0/duels.parquet", "duels")
        judged = tables.read_many(sorted((run / "iter_1/round_0/judgments").glob("*.parquet")), "judgments")
        responses = tables.read_many(
            sorted((run / "iter_1/round_0/responses").glob("*.parquet")), "responses"
        )
        assert len(judged) and set(judged["format"]) == set(judged["defences"]) == {"reference"}
        answer = dict(zip(duels["duel_id"], duels["answer"]))
        text = dict(
            zip(zip(responses["duel_id"], responses["member"], responses["sample"]), responses["response"])
        )
        if method == "sppo":  # win rates over a member's samples, right over wrong = 1
            assert judged["score"].between(1, 10).all()
            continue
        for j in judged.itertuples(index=False):  # every score is the reference's verdict
            right = exact_match(text[(j.duel_id, j.target, j.sample)], answer[j.duel_id])
            assert j.score == (10.0 if right else 1.0), j
        if method == "sparta":  # every judge agrees: reputation and pairs run on them unchanged
            assert judged.groupby(["duel_id", "target"])["score"].nunique().eq(1).all()
            assert (run / "iter_1/round_0/history.parquet").is_file()
        prefs = tables.read(run / "iter_1/preferences.parquet", "preferences")
        for p in prefs.itertuples(index=False):  # a pair exists only where exactly one is right
            assert exact_match(p.chosen, answer[p.duel_id]) and not exact_match(p.rejected, answer[p.duel_id])
        assert (run / "iter_1/members/ann/adapter/adapter_model.safetensors").is_file()
