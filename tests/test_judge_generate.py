"""Judging on a tiny random model: parsing, the expected score against brute force, truncation,
generate mode, seeded batched generation."""

import json
import math
from dataclasses import replace

import pytest
import torch

from sparta.backends.hf import generate
from sparta.chat import chat_ids
from sparta.judging import (
    ASSISTANT_PREFIX,
    SCORES,
    JudgeItem,
    candidate_ids,
    judge_answers,
    judge_duels,
    judge_ids,
    parse_score,
    parse_winner,
)
from sparta.settings import JudgeSettings, Sampling

from .helpers import served_model

EXPECTED = JudgeSettings(mode="expected", max_length=512, batch_size=2)
PUBLIC = replace(EXPECTED, secret_labels=False)  # the public scores 1-10 as candidates


def test_generated_judgments_are_batched_by_generate_batch_size_and_never_changed_by_it(tiny):
    """Generate mode batches by judge.generate_batch_size (decoding reads the weights once per
    step for every row: bigger batches are cheaper per judgment), not by the expected-mode
    batch_size; every judgment samples from its own seed, so the batch changes none."""
    model, tok = tiny
    served = served_model(model, tok)
    sizes = []

    class Recording:
        tok = served.tok

        def generate(self, prompts, sampling, seeds, batch_size, desc):
            sizes.append(batch_size)
            return served.generate(prompts, sampling, seeds, batch_size, desc)

    items = [JudgeItem(q, a) for q in ("What is 3 + 4?", "Tom has 5 apples.") for a in ("7", "seven", "8")]
    cfg = JudgeSettings(mode="generate", max_new_tokens=6, temperature=1.0, batch_size=3)
    texts = {}
    for size in (1, 4, 48):
        out = judge_answers(Recording(), items, replace(cfg, generate_batch_size=size), "sys", seeds=range(6))
        texts[size] = [j.raw for j in out]
    assert sizes == [1, 4, 48]
    assert texts[1] == texts[4] == texts[48]
    assert len(set(texts[1])) > 1  # sampled: the seeds differ, so do the judgments


@pytest.mark.parametrize(
    "text, score",
    [
        ('{"score": 7}', 7.0),
        ('Sure! {"score": 10} because it is right', 10.0),
        ('{"score": 8.5}', 8.5),
        ('"score": 4, "reason": "meh"', 4.0),
        ("Score: 6", 6.0),
        ("The score is 3.", 3.0),
        ("I would rate it 9/10.", 9.0),
        ("8 out of 10", 8.0),
    ],
)
def test_parse_cascade(text, score):
    assert parse_score(text) == (score, None)


@pytest.mark.parametrize("text", ["", "great answer!", '{"score": 0}', '{"score": 11}', "Score: -3"])
def test_parse_failures_give_null_and_a_reason(text):
    score, error = parse_score(text)
    assert score is None and error


@pytest.mark.parametrize(
    "text, winner",
    [('{"better": "A"}', "A"), ("[[B]]", "B"), ("Response B is better.", "B"), ("B", "B"), ("no idea", None)],
)
def test_parse_winner(text, winner):
    assert parse_winner(text)[0] == winner


def test_candidates_cover_split_ten(tiny):
    _, tok = tiny
    full = [chat_ids(tok, "judge this", "sys", ASSISTANT_PREFIX + f"{s}}}") for s in SCORES]
    prompt, conts = candidate_ids(full)
    assert len(conts) == 10 and len(set(map(tuple, conts))) == 10
    for s, c in zip(SCORES, conts):
        assert tok.decode(prompt + c).endswith(f"{s}}}")


def test_expected_mode_equals_brute_force(tiny):
    """The tree scoring of all ten continuations in one pass equals scoring each full
    candidate sequence alone."""
    model, tok = tiny
    items = [JudgeItem("What is 3 + 4?", "7"), JudgeItem("What is 3 + 4?", "It is 10, I think. " * 3)]
    out = judge_duels(served_model(model, tok), items, PUBLIC, "sys")
    for item, j in zip(items, out):
        user, _, _ = judge_ids(tok, item.prompt, [item.response], PUBLIC, "sys", ASSISTANT_PREFIX)
        prompt, conts = candidate_ids(
            [chat_ids(tok, user, "sys", ASSISTANT_PREFIX + f"{s}}}") for s in SCORES]
        )
        logps = []
        for c in conts:
            ids = torch.tensor([prompt + c])
            with torch.no_grad():
                lp = torch.log_softmax(model(ids).logits[0].float(), -1)
            logps.append(sum(lp[k - 1, ids[0, k]].item() for k in range(len(prompt), ids.shape[1])))
        w = [math.exp(x - max(logps)) for x in logps]
        expected = sum(s * x / sum(w) for s, x in zip(SCORES, w))
        assert j.score == pytest.approx(expected, abs=1e-4)
        probs = json.loads(j.raw)["probs"]
        assert sum(probs) == pytest.approx(1, abs=1e-4) and 1 <= j.score <= 10
        assert j.error is None


def test_truncation_keeps_instruction_and_prefix(tiny):
    _, tok = tiny
    _, bare, _ = judge_ids(
        tok, "What is 3 + 4?", [""], replace(EXPECTED, max_length=10_000), "sys", ASSISTANT_PREFIX
    )
    budget = len(bare) + 40
    cfg = replace(EXPECTED, max_length=budget)
    user, ids, cut = judge_ids(tok, "What is 3 + 4?", ["seven " * 500], cfg, "sys", ASSISTANT_PREFIX)
    assert cut and budget - 40 < len(ids) <= budget
    assert tok.decode(ids).endswith("<|im_start|>assistant\n" + ASSISTANT_PREFIX)
    assert "Output only a JSON object" in user and "What is 3 + 4?" in user
    _, _, cut2 = judge_ids(tok, "What is 3 + 4?", ["7"], cfg, "sys", ASSISTANT_PREFIX)
    assert not cut2
    with pytest.raises(ValueError, match="max_length"):
        judge_ids(
            tok, "What is 3 + 4?", ["seven " * 500], replace(EXPECTED, max_length=20), "sys", ASSISTANT_PREFIX
        )


def test_generate_mode_on_random_model_gives_null_scores(tiny):
    model, tok = tiny
    cfg = JudgeSettings(mode="generate", max_new_tokens=8, batch_size=2)
    out = judge_duels(
        served_model(model, tok), [JudgeItem("What is 3 + 4?", "7")] * 4, cfg, "sys", [0, 1, 2, 3]
    )
    assert len(out) == 4
    for j in out:
        assert (j.score is None) == (j.error is not None)
        assert j.requests == 1 and 0 < j.generated <= 8  # the cost table counts both


def test_generate_batched_matches_one_by_one_and_is_seeded(tiny):
    model, tok = tiny
    prompts = [
        chat_ids(tok, p, "sys") for p in ("What is 3 + 4?", "Tom has 5 apples.", "What is 10 - 2? Please.")
    ]
    greedy = Sampling.greedy_decoding(6)
    batched = generate(model, tok, prompts, greedy, [0] * 3, batch_size=3)
    single = [generate(model, tok, [p], greedy, [0], batch_size=1)[0] for p in prompts]
    assert [g.text for g in batched] == [g.text for g in single]
    assert all(g.finish_reason in ("stop", "length") for g in batched)
    sampled = Sampling(temperature=1.0, max_new_tokens=6)
    assert generate(model, tok, prompts, sampled, [7, 8, 9]) == generate(
        model, tok, prompts, sampled, [7, 8, 9]
    )


@pytest.mark.parametrize(
    "text, score",
    [
        ("Relevant, but it misses half of the question.\nScore: 2", 1 + 9 * 2 / 5),
        ("It earns 3 points (score: 3)... on reflection, Score: 4", 1 + 9 * 4 / 5),  # the last one
        ("Score: 0", 1.0),
        ("**Score:** 5", 10.0),
    ],
)
def test_additive_rubric_reads_the_last_score_on_the_1_to_10_scale(text, score):
    """The paper's 0-5 points stored as 1 + 9 points / 5: 0 -> 1, 2 -> 4.6, 4 -> 8.2, 5 -> 10."""
    from sparta.judging import ADDITIVE_RUBRIC

    assert ADDITIVE_RUBRIC.parse(text) == (pytest.approx(score), None)


@pytest.mark.parametrize("text", ["", "I award 4 points.", "Score: 6", "Score: 10"])
def test_additive_rubric_failures(text):
    from sparta.judging import ADDITIVE_RUBRIC

    score, error = ADDITIVE_RUBRIC.parse(text)
    assert score is None and error


def test_additive_rubric_expected_mode_equals_brute_force(tiny):
    """Expected mode with the additive prompt: the answer starts "Score: ", the candidates
    are 0..5, and the score is the expectation of 1 + 9 points / 5 under their probabilities,
    as scoring each candidate sequence alone gives it."""
    from sparta.judging import ADDITIVE_RUBRIC, judge_answers

    model, tok = tiny
    item = JudgeItem("What is 3 + 4?", "7")
    cfg = replace(PUBLIC, max_length=2048)  # the prompt is ~800 tokens on the tiny tokenizer
    (j,) = judge_answers(served_model(model, tok), [item], cfg, "sys", rubric=ADDITIVE_RUBRIC)
    user, _, _ = judge_ids(tok, item.prompt, [item.response], cfg, "sys", "Score: ", rubric=ADDITIVE_RUBRIC)
    assert "additive 5-point" in user and '"Score: <total points>"' in user and "What is 3 + 4?" in user
    prompt, conts = candidate_ids([chat_ids(tok, user, "sys", f"Score: {p}") for p in range(6)])
    logps = []
    for c in conts:
        ids = torch.tensor([prompt + c])
        with torch.no_grad():
            lp = torch.log_softmax(model(ids).logits[0].float(), -1)
        logps.append(sum(lp[k - 1, ids[0, k]].item() for k in range(len(prompt), ids.shape[1])))
    w = [math.exp(x - max(logps)) for x in logps]
    expected = sum((1 + 9 * p / 5) * x / sum(w) for p, x in enumerate(w))
    assert j.score == pytest.approx(expected, abs=1e-4) and j.error is None
    assert len(json.loads(j.raw)["probs"]) == 6
