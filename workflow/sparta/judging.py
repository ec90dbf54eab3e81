"""Cross-judging: the judge prompt, the parse cascade and the expected-score mode.

``generate`` mode samples the judge's text and parses ``{"score": N}`` (as the authors).
``expected`` mode forces the assistant prefix ``{"score": `` and computes the exact
probability of each of the ten score strings "1".."10" closed by ``}``, then reports the
expectation. It never samples, so a small judge always gives a usable, graded score.

Truncation never cuts the instruction or the assistant prefix: when the prompt is too long,
the response under judgment is shortened and the judgment records ``truncated``.

Pure: the judge is a served member (:mod:`sparta.backends`); only its tokenizer and its two
primitives are used here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from .chat import chat_text
from .settings import Sampling

JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the response to the "
    "instruction below. Consider whether it is correct, helpful, relevant and clear. Rate it "
    "on a scale of 1 to 10, where 1 is the worst and 10 is the best.\n\n"
    "[Instruction]\n{prompt}\n\n[Response]\n{response}\n[End of response]\n\n"
    'Output only a JSON object of the form {{"score": N}}, where N is an integer from 1 to 10.'
)
ASSISTANT_PREFIX = '{"score": '
SCORES = tuple(range(1, 11))
TRUNCATION_MARK = " [...]"


@dataclass(frozen=True)
class JudgeItem:
    prompt: str
    response: str


@dataclass(frozen=True)
class Judgment:
    score: float | None
    raw: str
    error: str | None
    truncated: bool


def judge_text(tok, item: JudgeItem, max_length: int, system: str | None, prefix: str) -> tuple[str, bool]:
    """The judge's full prompt text (chat template + prefix) within ``max_length`` tokens.

    Only the response is ever shortened (from its end), so the scoring instruction and the
    assistant prefix always survive. Raises if even an empty response does not fit.
    """

    def build(response: str) -> str:
        return chat_text(tok, JUDGE_PROMPT.format(prompt=item.prompt, response=response), system, prefix)

    def n_tokens(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    text = build(item.response)
    if n_tokens(text) <= max_length:
        return text, False
    resp_ids = tok(item.response, add_special_tokens=False)["input_ids"]
    overflow = n_tokens(text) - max_length
    keep = max(0, len(resp_ids) - overflow - 8)
    while True:
        text = build(tok.decode(resp_ids[:keep]) + TRUNCATION_MARK)
        if n_tokens(text) <= max_length:
            return text, True
        if keep == 0:
            raise ValueError(
                f"judge max_length {max_length} is too small for the instruction and prompt alone; "
                f"raise judge.max_length"
            )
        keep = max(0, keep - max(1, (n_tokens(text) - max_length)))


_PATTERNS = [
    ("json key", re.compile(r'"score"\s*:\s*"?(-?\d+(?:\.\d+)?)')),
    ("score label", re.compile(r"\bscore\s*(?:is|[:=])?\s*(-?\d+(?:\.\d+)?)", re.I)),
    ("fraction", re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", re.I)),
]


def parse_score(text: str) -> tuple[float | None, str | None]:
    """Score from a judge's text: a JSON object first, then a cascade of patterns.

    Returns (score, None) or (None, what went wrong). Scores outside [1, 10] are unusable;
    there is no fallback score.
    """
    found: float | None = None
    for m in re.finditer(r"\{[^{}]*\}", text):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("score"), (int, float)):
            found = float(obj["score"])
            break
    if found is None:
        for _, pattern in _PATTERNS:
            m = pattern.search(text)
            if m:
                found = float(m.group(1))
                break
    if found is None:
        return None, "no score found in judge output"
    if not 1 <= found <= 10 or math.isnan(found):
        return None, f"score {found:g} is outside 1-10"
    return found, None


def judge_by_generation(
    judge,
    items: list[JudgeItem],
    sampling: Sampling,
    seed: int,
    max_length: int,
    system: str | None,
    batch_size: int,
) -> list[Judgment]:
    """Sample the judge's answer for each item and parse it (mode ``generate``)."""
    built = [judge_text(judge.tok, it, max_length, system, "") for it in items]
    outs = judge.generate([t for t, _ in built], sampling, seed, batch_size, desc="judge")
    result = []
    for out, (_, truncated) in zip(outs, built):
        score, error = parse_score(out.text)
        result.append(Judgment(score, out.text, error, truncated))
    return result


def candidate_ids(tok, text: str, scores=SCORES) -> tuple[list[int], list[list[int]]]:
    """Shared prompt ids and the continuations "1}".."10}" (or any score range) after ``text``.

    Each candidate is tokenized together with the prompt, so a tokenizer that merges the
    prefix's last token with a digit, or splits "10" into "1" "0", is handled exactly.
    """
    full = [tok(text + f"{s}}}", add_special_tokens=False)["input_ids"] for s in scores]
    common = 0
    while all(len(f) > common for f in full) and len({f[common] for f in full}) == 1:
        common += 1
    return full[0][:common], [f[common:] for f in full]


def judge_by_expectation(
    judge, items: list[JudgeItem], max_length: int, system: str | None, batch_size: int
) -> list[Judgment]:
    """Exact probability of each score string, and its expectation (mode ``expected``).

    P(s) is normalised over the ten strings; ``raw`` holds the distribution and the
    probability mass the ten strings had before normalising.
    """
    built = [judge_text(judge.tok, it, max_length, system, ASSISTANT_PREFIX) for it in items]
    return score_texts(judge, [t for t, _ in built], [c for _, c in built], SCORES, batch_size)


def expected_scores(judge, user_texts: list[str], scores, system: str | None, batch_size: int):
    """Expected score of free-form judge prompts (e.g. against a reference answer)."""
    texts = [chat_text(judge.tok, u, system, ASSISTANT_PREFIX) for u in user_texts]
    return score_texts(judge, texts, [False] * len(texts), tuple(scores), batch_size)


def score_texts(judge, texts: list[str], truncated: list[bool], scores, batch_size: int) -> list[Judgment]:
    prepared = [candidate_ids(judge.tok, t, scores) for t in texts]
    logps = judge.continuation_logprobs([p for p, _ in prepared], [c for _, c in prepared], batch_size)
    return [expectation(lp, cut, scores) for lp, cut in zip(logps, truncated)]


def expectation(logps: list[float], truncated: bool, scores=SCORES) -> Judgment:
    """The expected score under the candidates' log-probabilities, normalised over them."""
    top = max(logps)
    weights = [math.exp(lp - top) for lp in logps]
    z = sum(weights)
    probs = [w / z for w in weights]
    mass = math.exp(top) * z
    score = sum(s * p for s, p in zip(scores, probs))
    raw = json.dumps({"probs": [round(p, 6) for p in probs], "mass": mass})
    if not math.isfinite(score):
        return Judgment(None, raw, "non-finite score probabilities", truncated)
    return Judgment(score, raw, None, truncated)
