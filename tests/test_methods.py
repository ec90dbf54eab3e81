"""The baselines' pairs from hand-made tables, the comparison's bootstrap against a case
computed by hand, and how a study is laid out."""

import json

import numpy as np
import pandas as pd
import pytest

from sparta import compare, tables
from sparta.methods import baseline_pairs, best_and_worst, self_duels, win_rates
from sparta.study import expand

from .workflow_helpers import REPO, tiny_config


def duel_rows(member="ann", prompts=("What is 2 + 2?",), reference=None):
    reference = reference or ["2 + 2 = 4."] * len(prompts)
    plan = pd.DataFrame(
        {
            "prompt_id": [f"p{i}" for i in range(len(prompts))],
            "prompt": list(prompts),
            "answer": ["4"] * len(prompts),
            "reference": list(reference),
            "round": 0,
            "position": range(len(prompts)),
        }
    )
    return self_duels(plan, [member], iteration=1, round_=0)


def answers(duel, member, texts):
    return pd.DataFrame(
        {
            "duel_id": duel,
            "model": member,
            "sample": range(len(texts)),
            "response": texts,
            "n_tokens": 1,
            "finish_reason": "stop",
        }
    )


def scores(duel, member, values, kind="score", raw=""):
    return pd.DataFrame(
        {
            "duel_id": duel,
            "judge": member,
            "target": member,
            "sample": range(len(values)),
            "kind": kind,
            "score": values,
            "raw": raw,
        }
    )


def test_a_baseline_member_fights_itself_on_every_prompt():
    duels = duel_rows(prompts=("a?", "b?"))
    assert list(duels["model_a"]) == list(duels["model_b"]) == ["ann", "ann"]
    assert duels["duel_id"].is_unique and set(duels["opponent_branch"]) == {"self"}
    tables.to_arrow(duels, "duels")


def test_self_rewarding_takes_the_best_and_worst_and_drops_ties():
    """Samples scored 6, 9, 2, 9: chosen = the first 9 (sample 1), rejected = the 2."""
    duels = duel_rows()
    d = duels["duel_id"][0]
    prefs = baseline_pairs(
        "self_rewarding", duels, answers(d, "ann", ["w", "x", "y", "z"]), scores(d, "ann", [6, 9, 2, 9])
    )
    assert len(prefs) == 1
    p = prefs.iloc[0]
    assert (p.chosen, p.rejected, p.chosen_score, p.rejected_score, p.margin) == ("x", "y", 9, 2, 7)
    assert p.trainee == "ann" and p.kind == "actor"
    tied = baseline_pairs("self_rewarding", duels, answers(d, "ann", ["w", "x"]), scores(d, "ann", [5, 5]))
    assert len(tied) == 0


def test_length_control_prefers_the_shorter_of_the_near_best():
    """Scores 9, 8.6, 2, 2.5 with rho 0.1 (range 7: band 0.7): near the best are "long best"
    (9) and "short" (8.6): chosen = the shorter; near the worst "tiny" (2) and "longest one"
    (2.5): rejected = the longer."""
    picked = best_and_worst(
        [(0, "long best answer", 9.0), (1, "short", 8.6), (2, "tiny", 2.0), (3, "longest one of all", 2.5)],
        0.1,
    )
    (_, chosen, _), (_, rejected, _) = picked
    assert (chosen, rejected) == ("short", "longest one of all")


def test_meta_rewarding_adds_the_preferred_judgment():
    duels = duel_rows()
    d = duels["duel_id"][0]
    meta = json.dumps({"user": "judge this: 4", "judgments": ['{"score": 8}', "bad"], "p_first": 0.8})
    judg = pd.concat(
        [scores(d, "ann", [3, 7]), scores(d, "ann", [8.2], kind="meta", raw=meta)], ignore_index=True
    )
    prefs = baseline_pairs("meta_rewarding", duels, answers(d, "ann", ["x", "y"]), judg)
    judge_pair = prefs[prefs["kind"] == "judge"].iloc[0]
    assert (judge_pair.prompt, judge_pair.chosen, judge_pair.rejected) == (
        "judge this: 4",
        '{"score": 8}',
        "bad",
    )
    assert judge_pair.chosen_score == pytest.approx(1 + 9 * 0.8) and judge_pair.trainee == "ann"
    assert list(prefs["kind"]) == ["actor", "judge"]


def test_spin_prefers_the_reference_to_the_member_s_answer():
    duels = duel_rows(prompts=("a?", "b?"), reference=("ref a", "ref b"))
    resp = pd.concat(
        [answers(duels["duel_id"][0], "ann", ["mine"]), answers(duels["duel_id"][1], "ann", ["ref b"])]
    )
    prefs = baseline_pairs("spin", duels, resp, tables.empty("judgments"))
    assert list(prefs["chosen"]) == ["ref a"] and list(prefs["rejected"]) == [
        "mine"
    ]  # equal to the reference: none


def test_win_rates_and_sppo_pairs():
    """P(0 beats 1) = 0.8, P(0 beats 2) = 0.6, P(1 beats 2) = 0.3:
    w0 = (0.8 + 0.6) / 2 = 0.7, w1 = (0.2 + 0.3) / 2 = 0.25, w2 = (0.4 + 0.7) / 2 = 0.55."""
    w = win_rates({(0, 1): 0.8, (0, 2): 0.6, (1, 2): 0.3}, [0, 1, 2])
    assert w == pytest.approx({0: 0.7, 1: 0.25, 2: 0.55})
    duels = duel_rows()
    d = duels["duel_id"][0]
    prefs = baseline_pairs(
        "sppo", duels, answers(d, "ann", ["x", "y", "z"]), scores(d, "ann", [1 + 9 * w[k] for k in range(3)])
    )
    p = prefs.iloc[0]
    assert (p.chosen, p.rejected) == ("x", "y")
    assert ((p.chosen_score - 1) / 9, (p.rejected_score - 1) / 9) == pytest.approx((0.7, 0.25))


def test_paired_bootstrap_by_hand():
    """Two items with differences 0 and 1: a bootstrap mean is 0, 0.5 or 1 with probability
    1/4, 1/2, 1/4: the 95% interval is [0, 1], P(mean <= 0) = 1/4, so p = 1/2."""
    d, low, high, p = compare.paired_bootstrap([np.array([0.0, 1.0])], replicates=40_000)
    assert (d, low, high) == (0.5, 0.0, 1.0)
    assert p == pytest.approx(0.5, abs=0.02)
    assert compare.paired_bootstrap([np.ones(5)])[1:] == (1.0, 1.0, 0.0)  # always better: p = 0
    assert compare.paired_bootstrap([np.zeros(5)])[3] == 1.0


def test_comparison_marks_significant_differences():
    """Seed 1, test items i0..i9: best init right on 3, Sparta's selected member on all 10."""
    items = [f"i{k}" for k in range(10)]

    def evaluation(member, checkpoint, right, val):
        rows = [("validation", f"v{k}", float(k < val)) for k in range(10)] + [
            ("test", it, float(k < right)) for k, it in enumerate(items)
        ]
        return pd.DataFrame(
            [
                {
                    "task": "t",
                    "member": member,
                    "checkpoint": checkpoint,
                    "split": s,
                    "example_id": e,
                    "score": x,
                }
                for s, e, x in rows
            ]
        )

    initial = pd.concat([evaluation("a", 0, 3, 5), evaluation("b", 0, 9, 1)])  # a is best on validation
    runs = pd.DataFrame({"run": ["s/sparta-seed1"], "experiment": ["sparta"], "seed": [1]})
    selection = pd.DataFrame({"task": ["t"], "stage": ["best final"], "checkpoint": [1], "member": ["b"]})
    table = compare.comparison(
        runs, {"s/sparta-seed1": evaluation("b", 1, 10, 6)}, {"s/sparta-seed1": selection}, {1: initial}, 2000
    ).set_index("experiment")
    assert table.loc["best init", "test"] == pytest.approx(0.3) and table.loc["sparta", "test"] == 1.0
    assert table.loc["sparta", "vs_best_init"] == pytest.approx(0.7)
    assert table.loc["sparta", "vs_best_init_significant"]
    assert "*" in compare.format_table(table.reset_index())


def test_a_study_shares_its_initial_pool_per_seed(tiny_base):
    base = tiny_config(tiny_base, "s")
    base["study"] = {"seeds": [1, 2], "experiments": {"sparta": {}, "spin": {"method": "spin"}}}
    study = expand(base)
    assert sorted(study.experiments) == ["s/sparta-seed1", "s/sparta-seed2", "s/spin-seed1", "s/spin-seed2"]
    assert study.init_of["s/sparta-seed1"] == study.init_of["s/spin-seed1"] == "s/_init-seed1"
    assert study.init_of["s/sparta-seed2"] == "s/_init-seed2"
    assert study.experiments["s/spin-seed2"].method == "spin" and study.experiments["s/spin-seed2"].seed == 2
    single = expand(tiny_config(tiny_base, "x"))
    assert not single.is_study and single.init_of == {"x": "x"}


def test_baselines_need_what_they_use(tiny_base):
    from sparta import config as sparta_config

    with pytest.raises(sparta_config.ConfigError, match="prompts.reference_column"):
        sparta_config.load(tiny_config(tiny_base, method="spin"), REPO)
    with pytest.raises(sparta_config.ConfigError, match="judge.format: pointwise"):
        sparta_config.load(
            tiny_config(tiny_base, method="self_rewarding", judge={"format": "pairwise"}), REPO
        )
    with pytest.raises(sparta_config.ConfigError, match="baselines.annotator.base"):
        sparta_config.load(
            tiny_config(tiny_base, method="sppo", baselines={"annotator": {"base": "/no/model"}}), REPO
        )
    cfg = tiny_config(tiny_base, method="spin", prompts={"reference_column": "solution"})
    assert sparta_config.load(cfg, REPO).method == "spin"
