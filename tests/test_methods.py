"""The baselines' pairs from hand-made tables, the comparison's bootstrap against a case
computed by hand, and how a study is laid out."""

import json
import zlib

import numpy as np
import pandas as pd
import pytest

from sparta import analysis, compare, tables
from sparta.methods import Round, best_and_worst, get, meta_rewarding, self_duels, win_rates
from sparta.methods import sppo as sppo_module
from sparta.settings import BaselineSettings
from sparta.study import expand

from .workflow_helpers import REPO, tiny_config


def baseline_pairs(method, duels, responses, judgments, length_control=None, min_margin=0.0, **others):
    """A baseline's pairs of a round with these settings (``others``: more of
    :class:`~sparta.settings.BaselineSettings` by name; the rest at their defaults)."""
    settings = BaselineSettings(length_control=length_control, min_margin=min_margin, **others)
    assert get(method).baseline, method
    return get(method).pairs(duels, responses, judgments, settings)


def trained_iterations(method: str, t: int, spin_history: int) -> list[int]:
    return get(method).trained_iterations(t, BaselineSettings(spin_history=spin_history))


def duel_rows(member="ann", prompts=("What is 2 + 2?",), reference=None, iteration=1):
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
    return self_duels(plan, [member], iteration=iteration, round_=0)


def answers(duel, member, texts):
    return pd.DataFrame(
        {
            "duel_id": duel,
            "member": member,
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
    assert list(duels["member_a"]) == list(duels["member_b"]) == ["ann", "ann"]
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


def test_every_method_drops_a_pair_of_two_identical_texts_and_counts_it():
    """Samples "x", "y", "x" scored 9, 5, 2 (the same text judged twice, differently): the best
    and the worst are one text, so no pair, and the round's counts say so; SPIN likewise
    when the member's answer is the reference word for word."""
    from types import SimpleNamespace

    from sparta.methods import get
    from sparta.settings import BaselineSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    resp, judged = answers(d, "ann", ["x", "y", "x"]), scores(d, "ann", [9, 5, 2])
    assert len(baseline_pairs("self_rewarding", duels, resp, judged)) == 0
    played = Round(1, 0, duels, resp, judged)
    _, prefs, counts = get("self_rewarding").aggregate(SimpleNamespace(), played, None, BaselineSettings())
    assert (len(prefs), counts["pairs"], counts["identical"]) == (0, 0, 1)
    # and the run's analysis counts it again, per iteration, from the same tables
    history = tables.empty("history")
    kept = analysis.pair_counts(
        get("self_rewarding"), duels, resp, judged, history, prefs, baselines=BaselineSettings()
    )
    assert kept.to_dict("records") == [{"iteration": 1, "pairs": 0, "identical": 1}]
    other = answers(d, "ann", ["x", "y", "z"])
    made = baseline_pairs("self_rewarding", duels, other, judged)
    kept = analysis.pair_counts(
        get("self_rewarding"), duels, other, judged, history, made, baselines=BaselineSettings()
    )
    assert kept.to_dict("records") == [{"iteration": 1, "pairs": 1, "identical": 0}]
    spin = duel_rows(reference=["The answer is 4."])
    same = answers(spin["duel_id"][0], "ann", ["The answer is 4."])
    assert len(baseline_pairs("spin", spin, same, scores(spin["duel_id"][0], "ann", [1]))) == 0


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


def test_meta_rewarding_length_control_follows_nemo_s_schedule():
    """The answers of the length-control test through the methods with no rho set:
    meta-rewarding's default schedule is NeMo-Aligner's (0, 0, 0.1): in iterations 1 and 2
    rho 0 (the best "long best answer" against the worst "tiny"), from iteration 3 on, past
    the schedule's end too, rho 0.1 (chosen "short", rejected "longest one of all");
    self-rewarding keeps none; a single number is every iteration's rho; a schedule given in
    the config is read by iteration."""
    from sparta.methods.meta_rewarding import LENGTH_CONTROL
    from sparta.methods.self_rewarding import rho_at
    from sparta.settings import BaselineSettings, build

    texts = ["long best answer", "short", "tiny", "longest one of all"]
    banded, plain = ("short", "longest one of all"), ("long best answer", "tiny")

    def picked(method, t, rho=None):
        duels = duel_rows(iteration=t)
        d = duels["duel_id"][0]
        prefs = baseline_pairs(
            method, duels, answers(d, "ann", texts), scores(d, "ann", [9.0, 8.6, 2.0, 2.5]), rho, 0
        )
        return prefs.iloc[0].chosen, prefs.iloc[0].rejected

    assert LENGTH_CONTROL == (0.0, 0.0, 0.1)
    assert [picked("meta_rewarding", t) for t in (1, 2, 3, 7)] == [plain, plain, banded, banded]
    assert [picked("self_rewarding", t) for t in (1, 3)] == [plain, plain]
    assert [picked("meta_rewarding", t, 0.1) for t in (1, 3)] == [banded, banded]
    assert [picked("meta_rewarding", t, (0.1, 0.0)) for t in (1, 2, 5)] == [banded, plain, plain]
    assert [rho_at((0.0, 0.2), t) for t in (1, 2, 3)] == [0.0, 0.2, 0.2] and rho_at(0.3, 9) == 0.3
    assert build(BaselineSettings, {"length_control": [0, 0.1]}, "baselines").length_control == (0.0, 0.1)
    with pytest.raises(Exception, match="length_control"):
        build(BaselineSettings, {"length_control": [0.5, 2]}, "baselines")


def test_meta_rewarding_rejudges_the_answer_whose_judgments_vary_most():
    """Sampled scores 8, 8, 8 (variance 0), 8, 5, 8 (mean 7: (1 + 4 + 1) / 3 = 2), 10, 1
    (one unusable; mean 5.5: 20.25), one usable score (none): the third answer is re-judged,
    though the first has the best mean; when no answer's judgments vary, none is. In expected
    mode the variance of the judge's score distribution: half 2 points (4.6 on the 1-10
    scale), half 5 (10): 0.5 x 2.7^2 x 2 = 7.29."""
    from sparta.judging import ADDITIVE_RUBRIC
    from sparta.methods.meta_rewarding import distribution_variance, most_varied, score_variance

    v = [score_variance(s) for s in ([8, 8, 8], [8, 5, 8], [10, None, 1], [None, 7, None])]
    assert v[:3] == pytest.approx([0, 2, 20.25]) and v[3] is None
    assert most_varied(dict(enumerate(v))) == 2
    assert most_varied({0: 2.0, 1: 2.0, 2: None}) == 0 and most_varied({0: None}) is None
    assert most_varied({0: 0.0, 1: 0.0}) is None  # judgments all agree: no judge pair to make
    raw = json.dumps({"probs": [0, 0, 0.5, 0, 0, 0.5], "mass": 1})
    assert distribution_variance(raw, ADDITIVE_RUBRIC) == pytest.approx(7.29)
    assert distribution_variance("Score: 4", ADDITIVE_RUBRIC) is None


def test_meta_judge_sees_judgments_without_their_scores():
    from sparta.judging import ADDITIVE_RUBRIC, SPARTA_RUBRIC, strip_score

    text = "Relevant and complete, worth 4/5.\nIt misses a unit.\n**Score: 4**"
    assert strip_score(text, ADDITIVE_RUBRIC) == "Relevant and complete, worth .\nIt misses a unit."
    assert strip_score("score: 3 then Score: 2", ADDITIVE_RUBRIC) == "then"
    assert strip_score('Good. {"score": 7} Score: 7/10', SPARTA_RUBRIC) == "Good."
    assert strip_score("No verdict here.", ADDITIVE_RUBRIC) == "No verdict here."


def test_meta_rewarding_ranks_judgments_by_elo():
    """Two judgments, the first preferred with P = 0.75 in both orders: Bradley-Terry gives
    P(1 beats 2) = 0.75, i.e. 400 log10(3) = 190.85 Elo apart, around 1000. Three judgments,
    0 beats 1 and 2 always, 1 beats 2 three times in four: 0 > 1 > 2."""
    from sparta.methods.meta_rewarding import elo_ratings, elo_win

    two = elo_ratings(2, [(0, 1, 0.75), (1, 0, 0.25)], prior=0)
    assert two == pytest.approx([1000 + 190.8485 / 2, 1000 - 190.8485 / 2], abs=1e-3)
    assert elo_win(two[0] - two[1]) == pytest.approx(0.75)
    three = elo_ratings(3, [(0, 1, 1), (1, 0, 0), (0, 2, 1), (2, 0, 0), (1, 2, 0.75), (2, 1, 0.25)])
    assert three[0] > three[1] > three[2] and sum(three) == pytest.approx(3000)


@pytest.mark.parametrize(
    "scores, ok",
    [
        ([None, None, None], False),  # none usable (a 135M judge's usual sampled judgments)
        ([4.6, None, None], False),  # one usable: the pair's other judgment has no score
        ([4.6, 4.6, None], False),  # the same score: the pair would be dropped
        ([4.6, 4.6, 4.6], False),
        ([4.6, 8.2, None], True),  # the unscored one may rank in between
        ([1.0, 4.6, 8.2], True),
    ],
)
def test_the_meta_judge_is_asked_only_where_a_judge_pair_can_form(scores, ok):
    from sparta.methods.meta_rewarding import can_pair

    assert can_pair(scores) is ok


def test_meta_rewarding_pairs_the_highest_and_lowest_rated_judgments():
    """Judgments rated 1100, 1000, 900 with scores 8, 6, 2: chosen the first, rejected the
    third, prompt the judge instruction, scores 1 + 9 P(1100 beats 900); equal scores of the
    two (8 and 8) drop the pair, and so do a row without ratings and an unscored judgment."""
    from sparta.methods.meta_rewarding import elo_win

    duels = duel_rows()
    d = duels["duel_id"][0]

    def meta(scores_, elo):
        return json.dumps(
            {
                "user": "judge this: 4",
                "judgments": ["good, Score: 4", "ok", "bad"],
                "scores": scores_,
                "elo": elo,
            }
        )

    judg = pd.concat(
        [
            scores(d, "ann", [3, 7]),
            scores(d, "ann", [8.2], kind="meta", raw=meta([8, 6, 2], [1100, 1000, 900])),
        ],
        ignore_index=True,
    )
    prefs = baseline_pairs("meta_rewarding", duels, answers(d, "ann", ["x", "y"]), judg, judge_pair_share=1.0)
    assert list(prefs["kind"]) == ["actor", "judge"]
    p = prefs.iloc[1]
    assert (p.prompt, p.chosen, p.rejected, p.trainee) == ("judge this: 4", "good, Score: 4", "bad", "ann")
    assert p.chosen_score == pytest.approx(1 + 9 * elo_win(200))
    for raw in (
        meta([8, 6, 8], [1100, 1000, 900]),
        meta([8, 6, 2], None),
        meta([8, 6, None], [1100, 1000, 900]),
    ):
        judg.loc[judg["kind"] == "meta", "raw"] = raw
        prefs = baseline_pairs(
            "meta_rewarding", duels, answers(d, "ann", ["x", "y"]), judg, judge_pair_share=1.0
        )
        assert list(prefs["kind"]) == ["actor"]


def _capped_round(chosen_scores, n_prompts=17):
    """A member's round: ``n_prompts`` prompts, each an actor pair (its answers scored 3 and 7),
    and meta rows on the first ones whose chosen judgments give the answer ``chosen_scores``."""
    duels = duel_rows(prompts=tuple(f"q{i}?" for i in range(n_prompts)))
    ids = list(duels["duel_id"])
    resp = pd.concat([answers(d, "ann", [f"a{i}", f"b{i}"]) for i, d in enumerate(ids)], ignore_index=True)
    judged = [scores(d, "ann", [3, 7]) for d in ids]
    for i, s in enumerate(chosen_scores):
        raw = {"user": f"judge q{i}", "judgments": [f"good {i}", "ok", "bad"], "scores": [s, 4.6, 1.0]}
        judged.append(
            scores(ids[i], "ann", [s], kind="meta", raw=json.dumps({**raw, "elo": [1100, 1000, 900]}))
        )
    return duels, resp, pd.concat(judged, ignore_index=True)


def test_meta_rewarding_caps_its_judge_pairs():
    """17 prompts, each an actor pair, and meta rows on the first six whose chosen judgments
    give 5, 5, 5, 5, 4, 5 points (10, 10, 10, 10, 8.2, 10). NeMo-Aligner's score cap (0.4, each
    of the additive scale's 6 scores counted once more) keeps a pair while (n_s + 1) / (n + 6)
    < 0.4: 1/6, 2/7, 3/8 kept, 4/9 not, the 4 points 1/9 kept, the last 5 points 4/10 not:
    prompts 0, 1, 2, 4. The share cap (0.15) allows J <= 0.15 (17 + J): J = 3, the first in
    the prompt order: prompts 0, 1, 2. Without the share cap 0, 1, 2, 4; without either all
    six. The round's counts say how many formed and how many were kept."""
    from types import SimpleNamespace

    from sparta.methods import get
    from sparta.methods.meta_rewarding import capped_judge_pairs, max_judge_pairs
    from sparta.settings import BaselineSettings

    duels, resp, judged = _capped_round([10, 10, 10, 10, 8.2, 10])
    method, ids = get("meta_rewarding"), list(duels["duel_id"])

    def kept(**caps):
        prefs = method.pairs(duels, resp, judged, BaselineSettings(**caps))
        assert (prefs["kind"] == "actor").sum() == 17
        return [ids.index(d) for d in prefs.loc[prefs["kind"] == "judge", "duel_id"]]

    assert kept() == [0, 1, 2]
    assert kept(judge_pair_share=1.0) == [0, 1, 2, 4]
    assert kept(judge_pair_share=1.0, judge_score_share=1.0) == [0, 1, 2, 3, 4, 5]
    played = Round(1, 0, duels, resp, judged)
    _, _, counts = method.aggregate(SimpleNamespace(), played, None, BaselineSettings())
    assert (counts["judge_pairs_formed"], counts["judge_pairs"], counts["pairs"]) == (6, 3, 20)
    # J <= share x (actor + J): 3 of 20 is 15%; 16 actor pairs allow 2; none without actor pairs
    assert [max_judge_pairs(a, 0.15) for a in (17, 16, 0)] == [3, 2, 0] and max_judge_pairs(5, 1.0) is None
    bob = {"trainee": "bob", "chosen": "x", "rejected": "y"}
    assert capped_judge_pairs([], [(bob, 10.0)], 0.15, 0.4, 6) == []
    # the 1-10 judge (10 scores): five pairs of one score pass (5 / 14 < 0.4), a sixth not (6 / 15)
    many = [({**bob, "chosen": str(i)}, 7.0) for i in range(6)]
    assert len(capped_judge_pairs([bob] * 100, many, 0.15, 0.4, 10)) == 5


def test_meta_rewarding_per_score_limit_as_nemo_aligners_code():
    """judge_pair_cap: per_score. 60 prompts, the first 10 without an actor pair (answers
    scored alike); meta rows on the first 8 whose chosen judgments give 10, 10, 8.2, 6.4, 8.2,
    4.6, 2.8, 2.8 (5, 5, 4, 3, 4, 2, 1, 1 points). NeMo's per-score limit: int(0.2 x 60 / 5) =
    2, a score's count from one under it, so one pair per score: prompts 0, 2, 3, 5, 6 (the
    score cap alone lets all 8 through, and the share cap, J <= 0.15 (50 + J), keeps 8); at
    most max(10 without an actor pair, 0.15 x 60 = 9) = 10: all five. By hand on the pieces:
    100 prompts allow int(0.2 x 100 / 5) - 1 = 3 pairs per score, 18 of 30 cycling over the
    6 scores; 95 actor pairs keep max(5, 0.1 x 100) = 10 of them, 80 keep max(20, 10): all 18;
    below 50 prompts (limit 1) none passes."""
    from sparta.methods import get
    from sparta.methods.meta_rewarding import capped_judge_pairs
    from sparta.settings import BaselineSettings

    duels, resp, judged = _capped_round([10, 10, 8.2, 6.4, 8.2, 4.6, 2.8, 2.8], n_prompts=60)
    tied = judged["kind"].eq("score") & judged["duel_id"].isin(duels["duel_id"][:10])
    judged.loc[tied, "score"] = 5.0
    method, ids = get("meta_rewarding"), list(duels["duel_id"])

    def kept(**caps):
        prefs = method.pairs(duels, resp, judged, BaselineSettings(**caps))
        assert (prefs["kind"] == "actor").sum() == 50
        return [ids.index(d) for d in prefs.loc[prefs["kind"] == "judge", "duel_id"]]

    assert kept() == kept(judge_pair_cap="share") == list(range(8))
    assert kept(judge_pair_cap="per_score") == [0, 2, 3, 5, 6]
    ann = {"trainee": "ann", "chosen": "x", "rejected": "y"}
    cycle = [({**ann, "chosen": str(i)}, 1.0 + 1.8 * (i % 6)) for i in range(30)]
    first = [p for p, _ in cycle[:18]]
    assert capped_judge_pairs([ann] * 95, cycle, 0.1, 0.4, 6, {"ann": 100}) == first[:10]
    assert capped_judge_pairs([ann] * 80, cycle, 0.1, 0.4, 6, {"ann": 100}) == first
    assert capped_judge_pairs([], cycle, 1.0, 1.0, 6, {"ann": 49}) == []
    assert len(capped_judge_pairs([], cycle, 1.0, 1.0, 6, {"ann": 50})) == 6


@pytest.mark.parametrize(
    "judge, baselines, why",
    [
        ({"mode": "generate"}, {"judge_samples": 1}, "judge_samples"),
        ({"mode": "generate", "temperature": 0.0}, {}, "greedy"),
        ({"mode": "expected", "temperature": 0.0}, {}, "greedy"),
        ({"mode": "expected", "top_k": 1}, {}, "greedy"),
        ({"mode": "generate"}, {}, None),
        ({"mode": "expected"}, {"judge_samples": 1}, None),  # the N judgments are sampled anew
    ],
)
def test_meta_rewarding_warns_where_no_judge_pair_can_form(judge, baselines, why):
    """Judge pairs need two sampled judgments of one answer that give different scores: greedy
    judging never gives them, nor one judgment per answer in generate mode (the answer to
    re-judge is picked by its sampled scores' variance). The other methods never warn."""
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    cfg, b = JudgeSettings(**judge), BaselineSettings(**baselines)
    warnings = get("meta_rewarding").judging_warnings(cfg, b)
    assert (warnings == []) if why is None else (len(warnings) == 1 and why in warnings[0])
    assert all(get(m).judging_warnings(cfg, b) == [] for m in ("sparta", "self_rewarding", "spin", "sppo"))


def test_the_config_check_notes_impossible_judge_pairs(tiny_base):
    from sparta import config as sparta_config

    cfg = tiny_config(
        tiny_base, method="meta_rewarding", judge={"mode": "generate"}, baselines={"judge_samples": 1}
    )
    (note,) = [n for n in sparta_config.load_study(cfg, REPO).notes if "judge pair" in n]
    assert note.startswith("meta_rewarding: no judge pair can form") and "judge_samples" in note
    ok = tiny_config(tiny_base, method="meta_rewarding")
    assert not [n for n in sparta_config.load_study(ok, REPO).notes if "judge pair" in n]


def test_the_analysis_counts_judgments_and_the_judge_pairs_that_formed():
    """Meta-rewarding's judging analysis over the capped round: ann's 34 score rows made 17
    actor pairs, its 6 meta rows 3 judge pairs (the caps); a round with no meta row (no judge
    pair could form) still has its meta row, with 0 pairs. Sparta (no trainee): pairs null."""
    from sparta import analysis
    from sparta.methods import get
    from sparta.settings import BaselineSettings

    duels, resp, judged = _capped_round([10, 10, 10, 10, 8.2, 10])
    judged["error"], judged["truncated"] = None, False
    method = get("meta_rewarding")
    prefs = method.pairs(duels, resp, judged, BaselineSettings())
    table = analysis.judging(judged, duels, prefs, method.judgment_owner, method.judgment_kinds)
    tables.to_arrow(table, "judging")
    got = table.set_index("kind")[["judgments", "unusable", "errors", "truncated", "pairs"]]
    assert got.loc["score"].tolist() == [34, 0, 0, 0, 17] and got.loc["meta"].tolist() == [6, 0, 0, 0, 3]
    plain = judged[judged["kind"] == "score"]
    none = analysis.judging(
        plain, duels, method.pairs(duels, resp, plain, BaselineSettings()), "judge", method.judgment_kinds
    )
    assert none.set_index("kind").loc["meta", ["judgments", "pairs"]].tolist() == [0, 0]
    sparta = analysis.judging(plain, duels, prefs.assign(trainee=None), "judge", ("score",))
    assert list(sparta["kind"]) == ["score"] and sparta["pairs"].isna().all()


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
    """P(0 beats 1) = 0.8, P(0 beats 2) = 0.6, P(1 beats 2) = 0.3; SPPO's official estimate
    averages over all K = 3 answers, each answer against itself at 1/2:
    w0 = (0.8 + 0.6 + 0.5) / 3 = 0.6333, w1 = (0.2 + 0.3 + 0.5) / 3 = 0.3333,
    w2 = (0.4 + 0.7 + 0.5) / 3 = 0.5333 (the mean over the other two, 0.7 / 0.25 / 0.55, was
    K / (K - 1) = 1.5 times as far from 1/2)."""
    w = win_rates({(0, 1): 0.8, (0, 2): 0.6, (1, 2): 0.3}, [0, 1, 2])
    assert w == pytest.approx({0: 1.9 / 3, 1: 1 / 3, 2: 1.6 / 3})
    assert sum(w.values()) == pytest.approx(1.5)  # K/2: each pair's probabilities sum to 1
    assert win_rates({}, [0]) == {0: 0.5}
    duels = duel_rows()
    d = duels["duel_id"][0]
    prefs = baseline_pairs(
        "sppo", duels, answers(d, "ann", ["x", "y", "z"]), scores(d, "ann", [1 + 9 * w[k] for k in range(3)])
    )
    p = prefs.iloc[0]
    assert (p.chosen, p.rejected) == ("x", "y")
    assert ((p.chosen_score - 1) / 9, (p.rejected_score - 1) / 9) == pytest.approx((1.9 / 3, 1 / 3))


def test_sppo_loss_of_the_three_answer_example():
    """The 3-answer example above (P_w = 1.9/3, P_l = 1/3) with eta = 1000 (the official
    runs' beta = 1e-3): targets eta (P - 1/2) = +133.33 and -166.67; with log-ratios 100 and
    -150: ((100 - 133.33)^2 + (-150 + 166.67)^2) / 2 = (1111.11 + 277.78) / 2 = 694.44, the
    official trainer's mean of the two terms (uclaml/SPPO, sppo/trainer.py; the paper's eq. 4.7
    writes their sum, 1388.89). With P = 1 / 0 it is half of TRL's sppo_hard,
    (a - 1/(2 beta))^2 + (b + 1/(2 beta))^2."""
    import torch

    from sparta.train import sppo_loss

    t = torch.tensor
    loss = sppo_loss(t([100.0]), t([-150.0]), t([1.9 / 3]), t([1 / 3]), 1000.0)
    assert loss.item() == pytest.approx(((100 - 400 / 3) ** 2 + (-150 + 500 / 3) ** 2) / 2, rel=1e-5)
    assert loss.item() == pytest.approx(694.444, rel=1e-5)
    a, b, beta = t([0.3]), t([-0.2]), 0.1
    hard = (a - 1 / (2 * beta)) ** 2 + (b + 1 / (2 * beta)) ** 2
    assert sppo_loss(a, b, t([1.0]), t([0.0]), 1 / beta).item() == pytest.approx(hard.item() / 2)


def test_sppo_samples_five_answers_unless_told():
    from sparta.methods import samples_per_prompt
    from sparta.settings import BaselineSettings

    default = BaselineSettings().samples
    assert samples_per_prompt("sppo", default) == 5 and samples_per_prompt("self_rewarding", default) == 4
    assert samples_per_prompt("sppo", 2) == 2 and samples_per_prompt("spin", 7) == 1
    assert BaselineSettings().sppo_eta == 1000.0


def test_sppo_records_failed_comparisons_and_truncation_per_answer(monkeypatch):
    """Answers "4", "5", "The answer is 4." compared by a stub annotator: 0 beats 1 (P = 1), the
    comparison of 0 and 2 gives no usable verdict (P = 1/2, as before), 2 beats 1 (P(1 beats 2)
    = 0) with an answer shortened. Win rates (1 + 1/2 + 1/2) / 3 = 2/3, 1/6, 2/3, as with every
    verdict usable; answers 0 and 2 say 1 of their 2 comparisons failed (scores still usable),
    answers 1 and 2 that a comparison of theirs was truncated; the analysis counts both."""
    from types import SimpleNamespace

    from sparta import analysis
    from sparta.judging import Judgment
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    texts = ["4", "5", "The answer is 4."]
    resp = answers(d, "ann", texts)
    verdict = {(0, 1): (1.0, False), (0, 2): (None, False), (1, 2): (0.0, True)}

    def judge_duels(served, items, cfg, system, seeds):
        out = []
        for a, b in zip(items[0::2], items[1::2]):
            p, cut = verdict[(texts.index(a.response), texts.index(b.response))]
            if p is None:
                out += [Judgment(None, "{}", "no usable verdict in either order", cut, False, 10, 1)] * 2
            else:
                out += [
                    Judgment(1 + 9 * p, "{}", None, cut, False, 10, 1),
                    Judgment(10 - 9 * p, "{}", None, cut, False, 10, 1),
                ]
        return out

    monkeypatch.setattr(sppo_module, "judge_duels", judge_duels)
    backend = SimpleNamespace(serve_each=lambda specs: None)
    sppo = get("sppo")
    run = _judge_run(duels, resp, JudgeSettings(), BaselineSettings(), backend)
    sppo.judge(run)
    table = run.table(sppo).sort_values("sample")
    assert [(s - 1) / 9 for s in table["score"]] == pytest.approx([2 / 3, 1 / 6, 2 / 3])
    failed = "1 of 2 comparisons failed, P = 1/2 used: no usable verdict in either order"
    assert list(table["error"].fillna("")) == [failed, "", failed]
    assert list(table["truncated"]) == [False, True, True]
    assert json.loads(table.iloc[0].raw)["failed"] == {"0>2": "no usable verdict in either order"}
    prefs = sppo.pairs(duels, resp, table, BaselineSettings())
    (row,) = analysis.judging(table, duels, prefs, sppo.judgment_owner, sppo.judgment_kinds).itertuples()
    assert (row.member, row.judgments, row.unusable, row.errors, row.truncated, row.pairs) == (
        "ann",
        3,
        0,
        2,
        2,
        1,
    )


def test_spin_trains_on_the_current_and_the_previous_iteration():
    """Iteration 1: "ref a" over "mine 1"; iteration 2: "ref a" over "mine 2". With history 2
    the member trains at the end of iteration 2 on both pairs (SPIN's recipe), with history 1
    on iteration 2's alone; iteration 1 has no previous one."""
    from sparta.train import pairs_of

    assert trained_iterations("spin", 1, 2) == [1] and trained_iterations("spin", 2, 2) == [1, 2]
    assert trained_iterations("spin", 5, 2) == [4, 5] and trained_iterations("spin", 5, 1) == [5]
    assert trained_iterations("sppo", 5, 2) == [5] and trained_iterations("sparta", 3, 2) == [3]
    by_iteration = {}
    for t, own in ((1, "mine 1"), (2, "mine 2")):
        duels = duel_rows(reference=("ref a",)).assign(iteration=t)
        by_iteration[t] = baseline_pairs(
            "spin", duels, answers(duels["duel_id"][0], "ann", [own]), tables.empty("judgments")
        )
    for history, expected in ((2, [(1, "mine 1"), (2, "mine 2")]), (1, [(2, "mine 2")])):
        frames = [by_iteration[t] for t in trained_iterations("spin", 2, history)]
        trained = pairs_of(pd.concat(frames, ignore_index=True), "ann")
        assert list(zip(trained["iteration"], trained["rejected"])) == expected
        assert set(trained["chosen"]) == {"ref a"}


def test_self_rewarding_needs_a_margin():
    """Expected scores 7.2, 7.0, 6.9: the best and worst differ by 0.3 < 0.5, no pair; 7.6 vs
    6.9 (0.7) makes one; min_margin 0 keeps the near tie."""
    duels = duel_rows()
    d = duels["duel_id"][0]
    near = baseline_pairs(
        "self_rewarding",
        duels,
        answers(d, "ann", ["a", "b", "c"]),
        scores(d, "ann", [7.2, 7.0, 6.9]),
        None,
        0.5,
    )
    assert len(near) == 0
    kept = baseline_pairs(
        "self_rewarding",
        duels,
        answers(d, "ann", ["a", "b", "c"]),
        scores(d, "ann", [7.2, 7.0, 6.9]),
        None,
        0,
    )
    assert list(kept["margin"]) == pytest.approx([0.3])
    apart = baseline_pairs(
        "meta_rewarding",
        duels,
        answers(d, "ann", ["a", "b", "c"]),
        scores(d, "ann", [7.6, 7.0, 6.9]),
        None,
        0.5,
    )
    assert (apart.iloc[0].chosen, apart.iloc[0].rejected) == ("a", "c")
    assert apart.iloc[0].margin == pytest.approx(0.7)


def test_self_rewarding_averages_its_judge_samples():
    """Three sampled judgments 8, unparsable, 5: the score is (8 + 5) / 2 = 6.5, tokens add
    up; none usable: no score, the errors kept; one sample is itself."""
    from sparta.judging import Judgment
    from sparta.methods import mean_judgment

    samples = [
        Judgment(8.0, "Score: 8", None, False, False, 10),
        Judgment(None, "hmm", "no score", True, False, 11),
        Judgment(5.0, "Score: 5", None, False, False, 12),
    ]
    j = mean_judgment(samples)
    assert j.score == pytest.approx(6.5) and j.error is None and j.tokens == 33 and j.truncated
    assert json.loads(j.raw) == {"samples": ["Score: 8", "hmm", "Score: 5"], "scores": [8.0, None, 5.0]}
    none = mean_judgment([samples[1], samples[1]])
    assert none.score is None and "no score" in none.error
    assert mean_judgment(samples[:1]) is samples[0]


def test_paired_bootstrap_by_hand():
    """Two items with differences 0 and 1: a bootstrap mean is 0, 0.5 or 1 with probability
    1/4, 1/2, 1/4: the 95% interval is [0, 1]. The p is the exact sign-flip test's: one
    discordant item is as extreme either way, p = 1; five items all better, 2 x 0.5^5 (the
    bootstrap's p was 0: no resample crosses 0)."""
    d, low, high, p = compare.paired_bootstrap([np.array([0.0, 1.0])], replicates=40_000)
    assert (d, low, high) == (0.5, 0.0, 1.0)
    assert p == 1.0
    assert compare.paired_bootstrap([np.ones(5)])[1:] == (1.0, 1.0, pytest.approx(0.0625))  # always better
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


def _judge_run(duels, responses, cfg, baselines=None, backend=None, specs=None):
    from sparta.members import MemberSpec
    from sparta.methods import JudgeRun
    from sparta.settings import BaselineSettings

    specs = specs or [MemberSpec("ann", "unused-base")]
    return JudgeRun(
        specs,
        duels,
        responses,
        cfg,
        "sys",
        baselines or BaselineSettings(),
        backend=backend,
        seed=lambda *p: zlib.crc32(repr(p).encode()),
    )


def test_self_rewarding_and_sppo_judge_with_the_reference_judge():
    """Answers "4", "5", "The answer is 4." to "What is 2 + 2?" (answer 4), no model: the
    member's self-judgments are 10, 1, 10; SPPO's annotator gives P(0 beats 1) = 1,
    P(0 beats 2) = 1/2, P(1 beats 2) = 0, so win rates (1 + 1/2 + 1/2) / 3 = 2/3,
    (0 + 0 + 1/2) / 3 = 1/6, (1/2 + 1 + 1/2) / 3 = 2/3; the rows belong to the member."""
    from sparta.methods import get
    from sparta.settings import JudgeSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    resp = answers(d, "ann", ["4", "5", "The answer is 4."])
    cfg = JudgeSettings(kind="reference")
    run = _judge_run(duels, resp, cfg)
    get("self_rewarding").judge(run)
    table = run.table(get("self_rewarding"))
    assert list(table["score"]) == [10.0, 1.0, 10.0] and set(table["judge"]) == {"ann"}
    assert set(table["requests"]) == {0}  # the reference judge runs no model
    assert set(table["format"]) == {"reference"}
    run = _judge_run(duels, resp, cfg)
    sppo = get("sppo")
    sppo.judge(run)
    table = run.table(sppo)
    assert set(table["judge"]) == {"annotator"} and set(table[sppo.judgment_owner]) == {"ann"}
    rates = [(s - 1) / 9 for s in table.sort_values("sample")["score"]]
    assert rates == pytest.approx([2 / 3, 1 / 6, 2 / 3])
    prefs = get("sppo").pairs(duels, resp, table, None)
    assert (prefs.iloc[0].chosen, prefs.iloc[0].rejected) == ("4", "5")


@pytest.mark.parametrize("scored", [False, True])
def test_meta_rewarding_judges_and_meta_judges_on_a_tiny_model(tiny_base, monkeypatch, scored):
    """The whole judging of meta-rewarding on a tiny model, without Snakemake: one score per
    answer (additive prompt, expected mode), then for the answer whose score distribution
    varies most three sampled judgments. A random model's judgments write no "Score: N", so
    no judge pair can form and the meta-judge is not asked: the "meta" row says so, its cost
    is the 3 sampled judgments. Where two judgments give different scores (``scored``: can_pair
    made to say so) the meta-judge compares them every two in both orders: the row holds the
    judge's instruction, the three judgments, six comparisons and the judgments' Elo ratings;
    its cost is 3 sampled judgments + 6 meta-judge requests."""
    from sparta.backends import open_backend
    from sparta.members import MemberSpec
    from sparta.methods import get, meta_rewarding
    from sparta.settings import BackendSettings, BaselineSettings, JudgeSettings, Runtime

    if scored:
        monkeypatch.setattr(meta_rewarding, "can_pair", lambda scores: True)

    spec = MemberSpec("ann", str(tiny_base))
    duels = duel_rows()
    d = duels["duel_id"][0]
    resp = answers(d, "ann", ["4", "It is 5."])
    cfg = JudgeSettings(mode="expected", max_length=2048, batch_size=4, max_new_tokens=6)
    backend = open_backend(BackendSettings(), Runtime(device="cpu", dtype="float32"), [spec])
    run = _judge_run(duels, resp, cfg, BaselineSettings(), backend, [spec])
    method = get("meta_rewarding")
    method.judge(run)
    table = run.table(method)
    scores = table[table["kind"] == "score"]
    assert list(scores["sample"]) == [0, 1] and scores["score"].between(1, 10).all()
    assert list(scores["requests"]) == [1, 1] and list(scores["generated_tokens"]) == [0, 0]
    meta = table[table["kind"] == "meta"]
    assert len(meta) == 1
    raw = json.loads(meta.iloc[0].raw)
    assert "additive 5-point" in raw["user"] and len(raw["judgments"]) == 3
    if not scored:
        assert raw["scores"] == [None] * 3 and raw["comparisons"] == [] and raw["elo"] is None
        assert meta.iloc[0].error == meta_rewarding.NOT_ASKED
        assert meta.iloc[0].requests == 3 and meta.iloc[0].generated_tokens > 0
        return
    assert sorted((a, b) for a, b, _ in raw["comparisons"]) == [
        (a, b) for a in range(3) for b in range(3) if a != b
    ]
    assert all(0 <= p <= 1 for *_, p in raw["comparisons"]) and len(raw["elo"]) == 3
    assert meta.iloc[0].requests == 3 + 6 and meta.iloc[0].generated_tokens > 0


def test_meta_rewarding_in_generate_mode_reuses_the_actor_judgments(monkeypatch):
    """Generate mode, judge_samples 3 = meta_judgments: the actor's sampled judgments are the
    ones compared (no new sampling). Answer 0 judged 8, 8, 8, answer 1 judged 10, 5.5, 1: answer
    1 is re-judged. The meta-judge (a stub) sees the judgments without "Score: N" and prefers
    the one ranked better ("careful" > "fair" > "lazy"), in both orders: 6 requests, the Elo
    order careful > fair > lazy, and the judge pair careful / lazy with their full texts."""
    from types import SimpleNamespace

    from sparta import judging
    from sparta.judging import Judgment
    from sparta.members import MemberSpec
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    resp = answers(d, "ann", ["4", "It is 4, since 2 + 2 = 4."])
    texts = {
        0: ["Fine. Score: 4"] * 3,
        1: ["careful reasons. Score: 5", "fair reasons. Score: 3", "lazy. Score: 0"],
    }
    rank = {"careful reasons.": 0, "fair reasons.": 1, "lazy.": 2}
    seen = []

    def judge_own(self, run):
        asked = [
            (run.specs[0], d, k, judging.JudgeItem("What is 2 + 2?", resp["response"][k])) for k in (0, 1)
        ]
        each = [
            Judgment(judging.ADDITIVE_RUBRIC.parse(t)[0], t, None, False, False, 100, 1, 20)
            for k in (0, 1)
            for t in texts[k]
        ]
        return asked, each, 3

    def meta_judge(judge, users, pairs, cfg, system):
        seen.extend(pairs)
        return [(1.0 if rank[a] < rank[b] else 0.0, 50) for a, b in pairs]

    method = get("meta_rewarding")
    monkeypatch.setattr(type(method), "judge_own", judge_own)
    monkeypatch.setattr(meta_rewarding, "meta_judge", meta_judge)
    monkeypatch.setattr(meta_rewarding, "judge_ids", lambda *a, **k: ("judge this: 4", [], False))
    backend = SimpleNamespace(serve=lambda spec: SimpleNamespace(tok=None), serve_each=lambda specs: None)
    cfg = JudgeSettings(mode="generate")
    run = _judge_run(duels, resp, cfg, BaselineSettings(judge_samples=3), backend, [MemberSpec("ann", "b")])
    method.judge(run)
    table = run.table(method)
    (row,) = table[table["kind"] == "meta"].itertuples(index=False)
    raw = json.loads(row.raw)
    assert raw["sample"] == 1 and raw["judgments"] == texts[1]
    assert len(seen) == 6 and not any("Score" in x for pair_ in seen for x in pair_)
    assert raw["elo"][0] > raw["elo"][1] > raw["elo"][2]
    assert row.requests == 6 and row.prompt_tokens == 300 and row.generated_tokens == 0
    prefs = method.pairs(duels, resp, table, BaselineSettings(judge_pair_share=1.0))  # no actor pair here
    judge_pair = prefs[prefs["kind"] == "judge"].iloc[0]
    assert (judge_pair.chosen, judge_pair.rejected, judge_pair.prompt) == (
        texts[1][0],
        texts[1][2],
        "judge this: 4",
    )


def test_pairs_whose_prompt_fills_the_dpo_budget_are_left_out(tiny):
    """TRL drops a pair whose prompt alone fills dpo.max_length (and stops when a member has
    none left): such pairs, e.g. meta-rewarding's judge pairs under a long judge instruction,
    are left out before the trainer, the others kept in order."""
    from sparta.chat import chat_ids
    from sparta.train import fitting_pairs

    _, tok = tiny
    prefs = pd.DataFrame({"prompt": ["short?", "long " * 300, "also short?"], "chosen": ["a"] * 3})
    budget = len(chat_ids(tok, "also short?", "sys")) + 5
    assert len(chat_ids(tok, prefs["prompt"][1], "sys")) >= budget
    kept = fitting_pairs(prefs, tok, "sys", budget)
    assert list(kept["prompt"]) == ["short?", "also short?"]
    assert len(fitting_pairs(prefs, tok, "sys", 10_000)) == 3


def test_pairs_whose_answer_the_dpo_budget_cuts_are_counted(tiny):
    """A judge pair's answer ends in its score: a budget that keeps the prompt but cuts the
    answer trains everything but that end, and the DPO job warns with the count."""
    from sparta.chat import chat_ids
    from sparta.train import cut_pairs

    _, tok = tiny
    judgment = "The answer is right and clear. " * 4 + "Score: 5"
    prefs = pd.DataFrame(
        {"prompt": ["judge this"] * 2, "chosen": [judgment, "Score: 5"], "rejected": ["Score: 1"] * 2}
    )
    prompt = len(chat_ids(tok, "judge this", "sys"))
    whole = len(tok(judgment, add_special_tokens=False)["input_ids"]) + 1
    assert cut_pairs(prefs, tok, "sys", prompt + whole) == 0
    assert cut_pairs(prefs, tok, "sys", prompt + whole - 1) == 1
    assert cut_pairs(prefs, tok, "sys", prompt + 2) == 2


def test_label_accuracy_of_no_pairs_is_an_empty_table():
    """A baseline whose actor pairs all fall under baselines.min_margin has no pairs to label
    (the tiny study's meta-rewarding): an empty label_accuracy table, not an error."""
    from sparta import analysis

    out = analysis.collective_label_accuracy(tables.empty("preferences"), duel_rows(), "number")
    assert len(out) == 0
    tables.to_arrow(out, "label_accuracy")


def _tiny_backend(tiny_base, names):
    from sparta.backends import open_backend
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, Runtime

    specs = [MemberSpec(n, str(tiny_base)) for n in names]
    return specs, open_backend(BackendSettings(), Runtime(device="cpu", dtype="float32"), specs)


def test_sparta_judging_on_a_tiny_model(tiny_base):
    """Sparta's judge job without Snakemake: of the pool ann, bob, cat, only cat may judge the
    duel ann vs bob; it scores both answers (pointwise, expected: one request each, a score on
    1-10, nothing generated), and a job serving only ann or bob writes nothing."""
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    duels = duel_rows().assign(member_a="ann", member_b="bob")
    d = duels["duel_id"][0]
    resp = pd.concat([answers(d, "ann", ["4"]), answers(d, "bob", ["5"])], ignore_index=True)
    cfg = JudgeSettings(mode="expected", max_length=2048, batch_size=4)
    specs, backend = _tiny_backend(tiny_base, ["ann", "bob", "cat"])
    method = get("sparta")
    run = _judge_run(duels, resp, cfg, BaselineSettings(), backend, specs)
    method.judge(run)
    table = run.table(method)
    assert list(table["judge"]) == ["cat", "cat"] and list(table["target"]) == ["ann", "bob"]
    assert table["score"].between(1, 10).all() and list(table["requests"]) == [1, 1]
    assert list(table["generated_tokens"]) == [0, 0] and (table["prompt_tokens"] > 0).all()
    assert set(table["defences"]) == {"plain_text,fence"}
    run = _judge_run(duels, resp, cfg, BaselineSettings(), backend, specs[:2])
    method.judge(run)
    assert run.table(method).empty


def test_self_rewarding_averages_sampled_judgments_on_a_tiny_model(tiny_base):
    """Self-rewarding in generate mode on a tiny model: each of the member's 2 answers judged
    judge_samples = 3 times; one row per answer with the 3 texts, the mean of the usable
    scores (None when none parsed), 3 requests and the generated tokens of all three."""
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    resp = answers(d, "ann", ["4", "It is 5."])
    cfg = JudgeSettings(mode="generate", max_length=2048, batch_size=4, max_new_tokens=5)
    specs, backend = _tiny_backend(tiny_base, ["ann"])
    method = get("self_rewarding")
    run = _judge_run(duels, resp, cfg, BaselineSettings(judge_samples=3), backend, specs)
    method.judge(run)
    table = run.table(method)
    assert list(table["sample"]) == [0, 1] and set(table["judge"]) == {"ann"}
    assert list(table["requests"]) == [3, 3] and (table["generated_tokens"] > 3).all()
    for row in table.itertuples(index=False):
        raw = json.loads(row.raw)
        assert len(raw["samples"]) == 3
        usable = [s for s in raw["scores"] if s is not None]
        assert (
            (row.score is None or pd.isna(row.score))
            if not usable
            else row.score == pytest.approx(sum(usable) / len(usable))
        )


def test_sppo_annotator_compares_every_two_answers_in_both_orders_on_a_tiny_model(tiny_base):
    """SPPO's annotator on a tiny model: K = 3 answers, every two compared in both orders
    (6 requests in all, 2 per answer), win probabilities that average to 1/2 over the K
    answers (each pair's probabilities sum to 1, the answer itself counts 1/2); the prompt's
    tokens are shared over its answers in whole parts that sum to the total."""
    from sparta.methods.sppo import share

    assert share(10, 3) == [4, 3, 3] and share(6, 3) == [2, 2, 2] and sum(share(7, 5)) == 7
    from sparta.methods import get
    from sparta.settings import BaselineSettings, JudgeSettings

    duels = duel_rows()
    d = duels["duel_id"][0]
    resp = answers(d, "ann", ["4", "5", "The answer is 4."])
    cfg = JudgeSettings(max_length=2048, batch_size=4)
    specs, backend = _tiny_backend(tiny_base, ["ann"])
    sppo = get("sppo")
    run = _judge_run(duels, resp, cfg, BaselineSettings(annotator=None), backend, specs)
    sppo.judge(run)
    table = run.table(sppo)
    assert set(table["judge"]) == {"annotator"} and list(table["sample"]) == [0, 1, 2]
    assert table["requests"].sum() == 6 and set(table["format"]) == {"pairwise"}
    rates = [(s - 1) / 9 for s in table["score"]]
    assert sum(rates) / 3 == pytest.approx(0.5) and all(1 / 6 <= r <= 5 / 6 for r in rates)
    p = json.loads(table.iloc[0].raw)["p_beats"]
    assert sorted(p) == ["0>1", "0>2", "1>2"]


def _jobs(method, duels, resp, cfg, backend, jobs, baselines=None) -> pd.DataFrame:
    """The judgments of ``jobs`` (each a list of the members it serves), by member and answer."""
    from sparta.settings import BaselineSettings

    out = []
    for specs in jobs:
        run = _judge_run(duels, resp, cfg, baselines or BaselineSettings(), backend, specs)
        method.judge(run)
        out.append(run.table(method))
    return pd.concat(out).sort_values(["target", "sample"]).reset_index(drop=True)


def test_sppo_label_tables_are_each_members_whatever_the_fanout(tiny_base, monkeypatch):
    """Secret labels on, ann and bob answer one prompt 3 times each and SPPO's annotator (named
    "annotator" for every member) compares them: one pool job serving both gives the judgments
    two member jobs give, each member's comparisons read through one table of its own (a
    single call once gave the pool job one table for both members' comparisons of the prompt)."""
    from sparta import judging
    from sparta.methods import get
    from sparta.settings import JudgeSettings

    duels = pd.concat([duel_rows("ann"), duel_rows("bob")], ignore_index=True)
    texts = {"ann": ["4", "5", "It is 4."], "bob": ["four", "3 + 1", "It is 5."]}
    resp = pd.concat([answers(d.duel_id, d.member_a, texts[d.member_a]) for d in duels.itertuples()])
    owner = {t: m for m, ts in texts.items() for t in ts}
    cfg = JudgeSettings(secret_labels=True, max_length=2048, batch_size=4)
    specs, backend = _tiny_backend(tiny_base, ["ann", "bob"])
    real, seen = judging.judge_duels, {}

    def recording(served, items, *rest):
        out = real(served, items, *rest)
        for item, j in zip(items, out):
            seen.setdefault(owner[item.response], set()).add(tuple(json.loads(j.raw)["labels"]))
        return out

    monkeypatch.setattr(sppo_module, "judge_duels", recording)
    sppo = get("sppo")
    pool = _jobs(sppo, duels, resp, cfg, backend, [specs])
    pool_tables, seen = seen, {}
    members = _jobs(sppo, duels, resp, cfg, backend, [[s] for s in specs])
    pd.testing.assert_frame_equal(pool, members)
    assert len(pool) == 6 and seen == pool_tables
    assert len(seen["ann"]) == len(seen["bob"]) == 1 and seen["ann"] != seen["bob"]


def test_an_odd_call_pads_without_changing_a_label_table(tiny_base):
    """Self-rewarding with secret labels (pointwise, expected): ann's 3 answers and bob's 1 in
    one pool job (4 items) or in member jobs (3 and 1: each call made even with an empty item
    of its own set) read through the same tables and give the same scores; padding with a
    copy of the last answer once added its seed to that answer's table."""
    from sparta.methods import get
    from sparta.settings import JudgeSettings

    duels = pd.concat([duel_rows("ann"), duel_rows("bob")], ignore_index=True)
    texts = {"ann": ["4", "5", "It is 4."], "bob": ["four"]}
    resp = pd.concat([answers(d.duel_id, d.member_a, texts[d.member_a]) for d in duels.itertuples()])
    cfg = JudgeSettings(mode="expected", secret_labels=True, max_length=2048, batch_size=4)
    specs, backend = _tiny_backend(tiny_base, ["ann", "bob"])
    method = get("self_rewarding")
    pool = _jobs(method, duels, resp, cfg, backend, [specs])
    members = _jobs(method, duels, resp, cfg, backend, [[s] for s in specs])
    labels = [[json.loads(r)["labels"] for r in t["raw"]] for t in (pool, members)]
    assert labels[0] == labels[1] and labels[0][0] == labels[0][2] != labels[0][3]
    assert list(pool["score"]) == pytest.approx(list(members["score"]), abs=1e-5)
    assert list(pool["requests"]) == list(members["requests"]) == [1, 1, 1, 1]
