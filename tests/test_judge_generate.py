"""Generation and judging on a tiny random model: batching, truncation, expected scores."""

import json
import math

import pytest
import torch

from sparta.backends.hf import HFMember, generate
from sparta.chat import chat_text
from sparta.judging import (
    ASSISTANT_PREFIX,
    SCORES,
    JudgeItem,
    candidate_ids,
    judge_by_expectation,
    judge_by_generation,
    judge_text,
    parse_score,
)
from sparta.settings import Sampling


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


def test_candidates_cover_split_ten(tiny):
    _, tok = tiny
    text = chat_text(tok, "judge this", "sys", ASSISTANT_PREFIX)
    prompt, conts = candidate_ids(tok, text)
    assert len(conts) == 10
    for s, c in zip(SCORES, conts):
        assert tok.decode(prompt + c).endswith(f"{s}}}")
    assert len(set(map(tuple, conts))) == 10


def test_expected_mode_equals_brute_force(tiny):
    """The cached continuation scoring equals scoring each full candidate sequence alone."""
    model, tok = tiny
    items = [JudgeItem("What is 3 + 4?", "7"), JudgeItem("What is 2 * 5?", "It is 10, I think. " * 3)]
    out = judge_by_expectation(HFMember(model, tok), items, 512, "sys", batch_size=2)
    for item, j in zip(items, out):
        text, _ = judge_text(tok, item, 512, "sys", ASSISTANT_PREFIX)
        prompt, conts = candidate_ids(tok, text)
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
    item = JudgeItem("What is 3 + 4?", "seven " * 500)
    bare, _ = judge_text(tok, JudgeItem("What is 3 + 4?", ""), 10_000, "sys", ASSISTANT_PREFIX)
    budget = len(tok(bare, add_special_tokens=False)["input_ids"]) + 40
    text, cut = judge_text(tok, item, budget, "sys", ASSISTANT_PREFIX)
    assert cut
    assert budget - 40 < len(tok(text, add_special_tokens=False)["input_ids"]) <= budget
    assert text.endswith("<|im_start|>assistant\n" + ASSISTANT_PREFIX)
    assert "Output only a JSON object" in text and "What is 3 + 4?" in text
    short, cut2 = judge_text(tok, JudgeItem("What is 3 + 4?", "7"), budget, "sys", ASSISTANT_PREFIX)
    assert not cut2 and "7" in short
    with pytest.raises(ValueError, match="max_length"):
        judge_text(tok, item, 20, "sys", ASSISTANT_PREFIX)


def test_generate_mode_on_random_model_gives_null_scores(tiny):
    model, tok = tiny
    items = [JudgeItem("What is 3 + 4?", "7")] * 3
    out = judge_by_generation(HFMember(model, tok), items, Sampling(max_new_tokens=8), 0, 512, "sys", 2)
    assert len(out) == 3
    for j in out:
        assert (j.score is None) == (j.error is not None)


def test_generate_batched_matches_one_by_one_and_is_seeded(tiny):
    model, tok = tiny
    prompts = ["What is 3 + 4?", "Tom has 5 apples.", "What is 10 - 2? Please answer."]
    texts = [chat_text(tok, p, "sys") for p in prompts]
    greedy = Sampling.greedy_decoding(6)
    batched = generate(model, tok, texts, greedy, 0, batch_size=3)
    single = [generate(model, tok, [t], greedy, 0, batch_size=1)[0] for t in texts]
    assert [g.text for g in batched] == [g.text for g in single]
    assert all(g.finish_reason in ("stop", "length") for g in batched)
    sampled = Sampling(temperature=1.0, max_new_tokens=6)
    assert generate(model, tok, texts, sampled, 7) == generate(model, tok, texts, sampled, 7)
