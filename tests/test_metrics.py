"""Answer extraction, MC1/MC2 and label accuracy against hand-checked cases."""

import math

import pandas as pd
import pytest
import torch

from sparta import analysis, metrics


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is 1,234.", "1234"),  # comma grouping and a trailing period
        ("So she has -5 apples left.", "-5"),  # negative
        ("It costs $3.50 in total.", "3.5"),  # currency and a decimal
        ("First 3, then 4, finally 12.", "12"),  # several numbers: the last
        ("Natalia sold 48 clips... #### 72", "72"),  # GSM8K marker wins over later text
        ("#### 1,000\nbonus 7", "1000"),
        ("7 + 6 = 13. The answer is 13.", "13"),
        ("2.0", "2"),
        ("no number here", None),
        ("", None),
    ],
)
def test_extract_number(text, expected):
    assert metrics.extract_number(text) == expected


@pytest.mark.parametrize(
    "prediction, answer, ok",
    [
        ("so the total is 1,234.", "1234", True),
        ("The answer is 12.", "#### 12", True),
        ("The answer is 12.", "13", False),
        ("I don't know", "5", False),
        ("-3", "-3.0", True),
    ],
)
def test_exact_match_numbers(prediction, answer, ok):
    assert metrics.exact_match(prediction, answer) is ok


def test_boxed_answers():
    assert metrics.extract_boxed(r"so \boxed{\frac{1}{2}} and then \boxed{3}") == "3"
    assert metrics.extract_boxed(r"\boxed{\frac{a}{b^{2}}}") == r"\frac{a}{b^{2}}"
    assert metrics.extract_boxed("no box") is None
    assert metrics.exact_match(r"The answer is $\boxed{\dfrac{1}{2}}$.", r"\frac{1}{2}", "boxed")
    assert metrics.exact_match(r"\boxed{ 42 }", "42.0", "boxed")
    assert not metrics.exact_match(r"\boxed{41}", "42", "boxed")


@pytest.mark.parametrize(
    "text, letter",
    [
        ("The answer is (B).", "B"),
        ("answer: c", "C"),
        ("D. Paris is the capital", "D"),
        ("I think (A) is right", "A"),
        ("B", "B"),
        ("none of these", None),
    ],
)
def test_extract_choice(text, letter):
    assert metrics.extract_choice(text, 4) == letter


def test_mc1_mc2_by_hand():
    """Options with log-likelihoods [-1, -2, -3], true labels [0, 1, 1].

    | option | p = exp(lp)  | true |
    |--------|--------------|------|
    | 0      | 0.3678794    | no   |
    | 1      | 0.1353353    | yes  |
    | 2      | 0.0497871    | yes  |
    MC1 = 0 (the best option is false); MC2 = (0.1353353 + 0.0497871) / 0.5530018 = 0.3347590
    """
    mc1, mc2 = metrics.mc1_mc2([-1.0, -2.0, -3.0], [0, 1, 1])
    assert mc1 == 0.0 and mc2 == pytest.approx(0.3347590, abs=1e-6)
    assert metrics.mc1_mc2([-0.5, -2.0], [1, 0])[0] == 1.0
    with pytest.raises(ValueError):
        metrics.mc1_mc2([-1.0], [0])


def test_mc1_mc2_on_tiny_model_matches_hand_computation(tmp_path):
    """option_logprobs sums the option's token log-probs after the context, as one would by hand."""
    from sparta.models import MemberLoader, MemberSpec

    from .helpers import option_logprobs, served_model
    from .tiny import build_tiny_model

    folder = build_tiny_model(tmp_path / "m")
    loader = MemberLoader("cpu", "float32")
    spec = MemberSpec("t", str(folder))
    model, tok = loader.load(spec), loader.tokenizer(spec)
    context, options = "Q: What is 3 + 4? A:", [" 7", " 12", " seven apples"]
    lps = option_logprobs(served_model(model, tok), context, options)
    by_hand = []
    for o in options:
        ctx = tok(context, add_special_tokens=False)["input_ids"]
        full = tok(context + o, add_special_tokens=False)["input_ids"]
        assert full[: len(ctx)] == ctx
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([full])).logits[0], -1)
        by_hand.append(sum(logp[k - 1, full[k]].item() for k in range(len(ctx), len(full))))
    assert lps == pytest.approx(by_hand, abs=1e-5)
    mc1, mc2 = metrics.mc1_mc2(lps, [1, 0, 0])
    p = [math.exp(x) for x in by_hand]
    assert mc2 == pytest.approx(p[0] / sum(p), abs=1e-6)
    assert mc1 == float(by_hand[0] == max(by_hand))


def test_label_accuracy_on_constructed_table():
    """Five pairs with answers: one chosen-right (correct), two rejected-right (wrong),
    one both right, one both wrong -> accuracy 1 / 3 over 3 informative pairs."""
    prefs = pd.DataFrame(
        {
            "iteration": [1, 1, 2, 2, 2],
            "prompt_id": ["p1", "p2", "p3", "p4", "p5"],
            "chosen": ["It is 4.", "It is 9.", "5", "10", "1"],
            "rejected": ["It is 5.", "It is 8.", "6", "10", "2"],
        }
    )
    answers = pd.Series({"p1": "4", "p2": "8", "p3": "6", "p4": "10", "p5": "3"})
    labelled = metrics.label_accuracy(prefs, answers)
    assert labelled["label"].tolist() == ["correct", "wrong", "wrong", "both right", "both wrong"]
    overall = metrics.summarize_label_accuracy(labelled, [])
    assert (overall.loc[0, "correct"], overall.loc[0, "wrong"], overall.loc[0, "informative"]) == (1, 2, 3)
    assert overall.loc[0, "accuracy"] == pytest.approx(1 / 3)
    per_iter = metrics.summarize_label_accuracy(labelled, ["iteration"]).set_index("iteration")
    assert per_iter.loc[1, "accuracy"] == 0.5 and per_iter.loc[2, "accuracy"] == 0.0
    # a baseline's pairs: accuracy of the pairs each member trained on
    duels = pd.DataFrame({"prompt_id": answers.index, "answer": answers.values})
    mine = analysis.collective_label_accuracy(
        prefs.assign(trainee=["a", "b", "a", "a", "b"]), duels, "number"
    )
    by = mine[mine["scope"] == "trainee"].set_index("judge")
    assert (by.loc["a", "correct"], by.loc["a", "informative"]) == (1, 2)
    assert (by.loc["b", "correct"], by.loc["b", "informative"]) == (0, 1)
    assert "trainee" not in set(analysis.collective_label_accuracy(prefs, duels, "number")["scope"])


def test_diversity_metrics():
    assert analysis.normalized_edit_distance("a b c", "a b c") == 0.0
    assert analysis.normalized_edit_distance("a b c d", "a x c") == pytest.approx(2 / 4)
    assert analysis.bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert analysis.bleu("dog", "the cat sat") < 0.1


def test_select_best_uses_validation_and_reports_test():
    scores = pd.DataFrame(
        {
            "task": "t",
            "checkpoint": [0, 0, 0, 0, 2, 2, 2, 2],
            "member": ["a", "a", "b", "b", "a", "a", "b", "b"],
            "split": ["validation", "test"] * 4,
            "score": [0.5, 0.9, 0.6, 0.1, 0.7, 0.2, 0.4, 0.99],
        }
    )
    sel = analysis.select_best(scores).set_index("stage")
    assert sel.loc["best initial", "member"] == "b" and sel.loc["best initial", "test"] == 0.1
    assert sel.loc["best final", "member"] == "a" and sel.loc["best final", "test"] == 0.2
    # the paper's selection: among every member of every checkpoint (here an initial one wins
    # on validation only if it beats them all; tie on validation: the earlier checkpoint)
    assert sel.loc["selected", "member"] == "a" and sel.loc["selected", "checkpoint"] == 2
    later = scores.assign(
        score=scores["score"].where(~((scores["checkpoint"] == 2) & (scores["member"] == "a")), 0.6)
    )
    sel = analysis.select_best(later).set_index("stage")
    assert (sel.loc["selected", "checkpoint"], sel.loc["selected", "member"]) == (0, "b")
    assert sel.loc["selected", "tied"] == 2  # b@0 and a@2 tie on validation: the table says so
    assert analysis.select_best(scores).set_index("stage").loc["selected", "tied"] == 1
    final = analysis.select_best(later, "final").set_index("stage")
    assert (final.loc["selected", "checkpoint"], final.loc["selected", "member"]) == (2, "a")
    with pytest.raises(ValueError, match="all or final"):
        analysis.select_best(scores, "best")


def test_wilson_interval_holds_its_estimate_at_the_ends():
    from sparta.metrics import wilson_interval

    for n in range(1, 200):  # rounding once left p = 1 just above the upper end (n = 4, 10, ...)
        assert wilson_interval(n, n)[1] == 1.0 and wilson_interval(0, n)[0] == 0.0
    low, high = wilson_interval(3, 10)
    assert low < 0.3 < high and round(low, 3) == 0.108 and round(high, 3) == 0.603
