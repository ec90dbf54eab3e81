"""Cross-judging: the judge prompt, the parse cascade and the expected-score mode.

``generate`` mode samples the judge's text and parses ``{"score": N}`` (as the authors).
``expected`` mode forces the assistant prefix ``{"score": `` and computes the exact
probability of each of the ten score strings "1".."10" closed by ``}``, then reports the
expectation. It never samples, so a small judge always gives a usable, graded score.

Truncation never cuts the instruction or the assistant prefix: when the prompt is too long,
the response under judgment is shortened and the judgment records ``truncated``.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .generate import SamplingParams
from .models import chat_text

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
    judge, items: list[JudgeItem], sampling: SamplingParams, seed: int, max_length: int,
    system: str | None, batch_size: int,
) -> list[Judgment]:  # fmt: skip
    """Sample the judge's answer for each item and parse it (mode ``generate``).

    ``judge`` is a served member (:mod:`sparta.engines`): any backend."""
    tok = judge.tok
    texts, cut = zip(*(judge_text(tok, it, max_length, system, "") for it in items)) if items else ((), ())
    outs = judge.generate(list(texts), sampling, seed, batch_size, desc="judge")
    result = []
    for out, truncated in zip(outs, cut):
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

    The shared prompt runs once per item; the ten continuations then run against its
    key/value cache. P(s) is normalised over the ten strings; ``raw`` holds the
    distribution and the probability mass the ten strings had before normalising.
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
    return [_expectation(lp, cut, scores) for lp, cut in zip(logps, truncated)]


@torch.no_grad()
def batched_continuation_logprobs(model, pad: int, prompts, conts, batch_size: int) -> list[list[float]]:
    """Hugging Face backend of ``continuation_logprobs``: prompts sorted by length, batched
    with left padding; each prompt runs once and its continuations run against its cache.
    Rows of one batch must have the same number of continuations."""
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: (len(conts[i]), -len(prompts[i])))
    out: list[list[float]] = [[] for _ in prompts]
    with tqdm(total=len(prompts), desc="score", unit="prompt") as bar:
        start = 0
        while start < len(order):
            width = len(conts[order[start]])
            idx = [i for i in order[start : start + batch_size] if len(conts[i]) == width]
            for i, lp in zip(idx, _candidate_logprobs(model, [prompts[i] for i in idx],
                                                      [conts[i] for i in idx], pad, device)):  # fmt: skip
                out[i] = lp
            start += len(idx)
            bar.update(len(idx))
    return out


def _candidate_logprobs(model, prompts, conts, pad, device) -> list[list[float]]:
    b, c = len(prompts), len(conts[0])
    width = max(len(p) for p in prompts)
    ids = torch.full((b, width), pad, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    first = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    last_logp = torch.log_softmax(first.logits[:, -1].float(), -1)  # (b, vocab)
    cache = first.past_key_values
    cache.batch_repeat_interleave(c)
    clen = max(len(x) for row in conts for x in row)
    cont = torch.full((b * c, clen), pad, dtype=torch.long)
    cmask = torch.zeros((b * c, clen), dtype=torch.long)
    for i, row in enumerate(conts):
        for j, x in enumerate(row):
            cont[i * c + j, : len(x)] = torch.tensor(x)
            cmask[i * c + j, : len(x)] = 1
    cont, cmask = cont.to(device), cmask.to(device)
    full_mask = torch.cat([mask.repeat_interleave(c, 0), cmask], dim=1)
    start = pos[:, -1:].repeat_interleave(c, 0) + 1
    cpos = start + torch.arange(clen, device=device)
    nxt = model(
        input_ids=cont,
        attention_mask=full_mask,
        position_ids=cpos,
        use_cache=True,
        **{_cache_kwarg(model): cache},
    )
    logp = torch.log_softmax(nxt.logits.float(), -1)  # (b*c, clen, vocab)
    result = []
    for i in range(b):
        row = []
        for j, x in enumerate(conts[i]):
            total = last_logp[i, x[0]].item()
            for k in range(1, len(x)):
                total += logp[i * c + j, k - 1, x[k]].item()
            row.append(total)
        result.append(row)
    return result


def _cache_kwarg(model) -> str:
    # transformers 5.2x renamed the forward argument `past_key_values` to `cache`
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _expectation(logps: list[float], truncated: bool, scores=SCORES) -> Judgment:
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
