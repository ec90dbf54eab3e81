"""Judging: duels and answers through a served judge, in either format (pointwise,
pairwise) and mode (expected: the exact expectation over the candidate verdicts; generate:
sampled and parsed), the meta-judge, free-form expected scores, and the reference judge."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from ..chat import chat_ids
from ..metrics import exact_match
from ..seeds import derive_seed
from ..settings import JudgeSettings
from .defence import _prepared, fence, verdict_labels
from .parse import parse_winner
from .prompts import (
    ASSISTANT_PREFIX,
    LABEL_PREFIX,
    META_PROMPT,
    PAIRWISE_PREFIX,
    SCORES,
    SPARTA_RUBRIC,
    JudgeItem,
    Judgment,
    Rubric,
    candidate_ids,
    judge_ids,
)


def _expectation(logps: list[float], values) -> tuple[float | None, list[float], float]:
    """(expected value, the candidates' normalised probabilities, their total mass)."""
    top = max(logps)
    weights = [math.exp(lp - top) for lp in logps]
    z = sum(weights)
    probs = [w / z for w in weights]
    value = sum(v * p for v, p in zip(values, probs))
    return (value if math.isfinite(value) else None), probs, math.exp(top) * z


def expectation(logps: list[float], truncated: bool, scores=SCORES) -> Judgment:
    """The expected score under the candidates' log-probabilities, normalised over them."""
    score, probs, mass = _expectation(logps, scores)
    raw = json.dumps({"probs": [round(p, 6) for p in probs], "mass": mass})
    if score is None:
        return Judgment(None, raw, "non-finite score probabilities", truncated)
    return Judgment(score, raw, None, truncated)


def judge_duels(
    judge,
    items: list[JudgeItem],
    cfg: JudgeSettings,
    system: str | None,
    seeds=None,
    rubric: Rubric = SPARTA_RUBRIC,
) -> list[Judgment]:
    """Judge duels: ``items`` holds each duel's two answers in turn (a, b, a, b, ...), ``judge``
    serves one request per item; one Judgment per item, the answer's score on the 1-10 scale.
    ``seeds`` (one per item) seed mode generate. Each duel makes two requests: each answer alone
    (pointwise), or both answers in both orders (pairwise); ``rubric``: how a pointwise judge is
    asked and read. With ``judge.secret_labels`` (expected mode) every answer one judge scores
    for one prompt in this call shares one label table (:func:`_label_tables`), so a judge's
    liking for one label cancels within the set, as position bias does."""
    if len(items) % 2:
        raise ValueError("items come in pairs: the two answers of each duel")
    pairs = cfg.format == "pairwise"
    secret = cfg.secret_labels and cfg.mode == "expected"
    prefix = (PAIRWISE_PREFIX if pairs else rubric.prefix) if cfg.mode == "expected" else ""
    if secret and not pairs:
        prefix = LABEL_PREFIX
    tables = _label_tables(judge, items, seeds, 2 if pairs else len(rubric.points)) if secret else None
    built, sanitized, duel_labels = _duel_requests(
        judge, items, cfg, system, prefix=prefix, rubric=rubric, tables=tables
    )
    if not built:
        return []
    cut = [c for _, _, c in built]
    read = [len(ids) for _, ids, _ in built]
    if pairs:  # both orders read both answers: each answer is charged half
        read = [(read[k - k % 2] + read[k - k % 2 + 1]) // 2 for k in range(len(read))]
    if cfg.mode == "expected":
        logps = _candidate_logprobs(judge, built, duel_labels, cfg, system, prefix=prefix, rubric=rubric)
    else:
        outs = judge.generate(
            [ids for _, ids, _ in built], cfg.sampling, list(seeds), cfg.generate_batch_size, "judge"
        )
    result: list[Judgment] = []
    for k in range(0, len(built), 2):
        if cfg.mode == "expected":
            pair = _expected_pair(logps[k : k + 2], cut[k : k + 2], duel_labels[k : k + 2], pairs, rubric)
            made = [0, 0]
        else:
            pair = _generated_pair(outs[k : k + 2], cut[k : k + 2], pairs, rubric)
            made = [outs[k].n_tokens, outs[k + 1].n_tokens]
        # one model request per answer: pointwise its own, pairwise one of the duel's two orders
        result += [
            replace(j, sanitized=sanitized[k + i], tokens=read[k + i], requests=1, generated=made[i])
            for i, j in enumerate(pair)
        ]
    return result


def _duel_requests(judge, items: list[JudgeItem], cfg: JudgeSettings, system, *, prefix: str, rubric, tables):
    """The judge's requests of each duel (two: each answer alone, or both answers in both
    orders) as :func:`judge_ids` builds them, whether each answer was sanitized, and the
    label table each request is read through (None: the public labels)."""
    pairs = cfg.format == "pairwise"
    built, sanitized, duel_labels = [], [], []
    for k, (a, b) in enumerate(zip(items[0::2], items[1::2])):
        (ya, sa), (yb, sb) = _prepared(a.response, cfg), _prepared(b.response, cfg)
        # pointwise each answer is its own request, read through its own set's table; a
        # pairwise duel's two answers are one set (one prompt, one judge)
        la, lb = (tables[2 * k], tables[2 * k + 1]) if tables is not None else (None, None)
        if pairs:
            asked = ((a.prompt, [ya, yb], la), (a.prompt, [yb, ya], la))
            lb = la
        else:  # each answer under its own prompt (judge_answers pairs items across prompts)
            asked = ((a.prompt, [ya], la), (b.prompt, [yb], lb))
        for prompt, shown, labels in asked:
            built.append(
                judge_ids(judge.tok, prompt, shown, cfg, system, prefix, rubric=rubric, labels=labels)
            )
        sanitized += [sa, sb]
        duel_labels += [la, lb]
    return built, sanitized, duel_labels


def _candidate_logprobs(
    judge, built, duel_labels, cfg: JudgeSettings, system, *, prefix: str, rubric
) -> list:
    """Expected mode: the log-probability of each candidate verdict after each request.
    Secret labels: the candidates are the judgment's labels, in the order of the levels
    (pointwise) or of the positions (pairwise), so the mapping back is by position."""
    pairs = cfg.format == "pairwise"
    public = ('A"}', 'B"}') if pairs else tuple(f"{s}{rubric.candidate_suffix}" for s in rubric.points)
    asked = [
        (user, [prefix + c for c in (public if labels is None else [f'{x}"}}' for x in labels])])
        for (user, _, _), labels in zip(built, duel_labels)
    ]
    return _logprobs(judge, asked, system, cfg.batch_size, cfg.plain_text)[0]


def _logprobs(judge, asked: list[tuple], system, batch_size: int, plain: bool = True) -> tuple[list, list]:
    """The log-probability of each candidate start of the answer after each (user message,
    candidates) of ``asked``, and the prompt tokens each request read."""
    prepared = [
        candidate_ids([chat_ids(judge.tok, u, system, c, plain=plain) for c in cs]) for u, cs in asked
    ]
    prompts = [p for p, _ in prepared]
    logps = judge.continuation_logprobs(prompts, [c for _, c in prepared], batch_size) if prompts else []
    return logps, [len(p) for p in prompts]


def _expected_pair(logps: list, cut: list, labels: list, pairs: bool, rubric) -> tuple[Judgment, Judgment]:
    """A duel's two judgments from its two requests' candidate log-probabilities: each
    answer's expected score (pointwise), or P(a wins) over both orders (pairwise)."""
    if not pairs:
        scaled = tuple(rubric.scale(s) for s in rubric.points)
        pair = (expectation(logps[0], cut[0], scaled), expectation(logps[1], cut[1], scaled))
        if labels[0] is not None:
            pair = tuple(_with_labels(j, labels[i]) for i, j in enumerate(pair))
        return pair
    pa, probs_ab, _ = _expectation(logps[0], (1.0, 0.0))  # order (a, b): P("A")
    pb, probs_ba, _ = _expectation(logps[1], (0.0, 1.0))  # order (b, a): P("B")
    raw = {"ab": [round(p, 6) for p in probs_ab], "ba": [round(p, 6) for p in probs_ba]}
    raw = json.dumps(raw if labels[0] is None else {**raw, "labels": list(labels[0])})
    p_a = None if pa is None or pb is None else (pa + pb) / 2
    return _pairwise(p_a, raw, cut[0] or cut[1])


def _generated_pair(outs: list, cut: list, pairs: bool, rubric) -> tuple[Judgment, Judgment]:
    """A duel's two judgments from its two generated verdicts: each answer's parsed score
    (pointwise), or the share of the two orders that a wins (pairwise)."""
    if not pairs:
        return tuple(_parsed(out.text, c, rubric) for out, c in zip(outs, cut))
    votes = []
    for out, a_is in zip(outs, ("A", "B")):
        winner, _ = parse_winner(out.text)
        if winner is not None:
            votes.append(1.0 if winner == a_is else 0.0)
    raw = json.dumps({"ab": outs[0].text, "ba": outs[1].text})
    return _pairwise(sum(votes) / len(votes) if votes else None, raw, cut[0] or cut[1])


def _label_tables(judge, items: list[JudgeItem], seeds, n: int) -> list[tuple[str, ...]]:
    """The secret-label table of each item: one per judged set (the judge serving the item's
    request and the item's prompt), drawn from the sorted seeds of the set's items (without
    seeds: its answers and prompt), so the order the set is asked in never changes it."""
    members = getattr(judge, "members", None)
    if isinstance(members, list):
        judges = [getattr(m, "name", m) for m in members]
    else:
        judges = [getattr(members, "name", members)] * len(items)
    sets: dict[tuple, list[int]] = {}
    for i, item in enumerate(items):
        sets.setdefault((str(judges[i]), item.prompt), []).append(i)
    tables: list[tuple[str, ...]] = [()] * len(items)
    for (_, prompt), members_of_set in sets.items():
        if seeds is not None:
            identity = sorted(str(seeds[i]) for i in members_of_set)
        else:
            identity = sorted(items[i].response for i in members_of_set) + [prompt]
        labels = verdict_labels(derive_seed("verdict-labels", *identity), n)
        for i in members_of_set:
            tables[i] = labels
    return tables


def judge_answers(
    judge,
    items: list[JudgeItem],
    cfg: JudgeSettings,
    system: str | None,
    seeds=None,
    rubric: Rubric = SPARTA_RUBRIC,
) -> list[Judgment]:
    """Score answers each alone (pointwise, any number of them): one Judgment per item."""
    if cfg.format != "pointwise":
        raise ValueError("judge_answers scores answers alone: judge.format must be pointwise")
    odd = len(items) % 2
    padded = items + items[-1:] * odd
    seeds = None if seeds is None else list(seeds) + list(seeds)[-1:] * odd
    if odd and hasattr(judge, "members") and isinstance(judge.members, list):
        judge = type(judge)(judge.backend, judge.members + judge.members[-1:])
    return judge_duels(judge, padded, cfg, system, seeds, rubric)[: len(items)]


def meta_judge(judge, users: list[str], pairs: list[tuple[str, str]], cfg: JudgeSettings, system) -> list:
    """The meta-judge of Meta-Rewarding in expected mode, one request per item: for each
    (judge instruction, (first, second)) shown in this order, (P(the judgment shown first is
    better), prompt tokens read); P is None where it is not finite. Compare two judgments in
    both orders by passing both (first, second) and (second, first)."""
    asked = []
    for user, pair_ in zip(users, pairs):
        first, second = (fence(x) if cfg.fence else x for x in pair_)
        text = META_PROMPT.format(user=user, a=first, b=second)
        asked.append((text, [PAIRWISE_PREFIX + c for c in ('A"}', 'B"}')]))
    logps, read = _logprobs(judge, asked, system, cfg.batch_size, cfg.plain_text)
    return [(_expectation(lp, (1.0, 0.0))[0], n) for lp, n in zip(logps, read)]


def _parsed(text: str, truncated: bool, rubric: Rubric = SPARTA_RUBRIC) -> Judgment:
    score, error = rubric.parse(text)
    return Judgment(score, text, error, truncated)


def _pairwise(p_a: float | None, raw: str, truncated: bool) -> tuple[Judgment, Judgment]:
    """The pointwise-scale scores of both answers from P(a better)."""
    if p_a is None:
        error = "no usable verdict in either order"
        return Judgment(None, raw, error, truncated), Judgment(None, raw, error, truncated)
    return Judgment(1 + 9 * p_a, raw, None, truncated), Judgment(10 - 9 * p_a, raw, None, truncated)


def _with_labels(j: Judgment, labels) -> Judgment:
    return replace(j, raw=json.dumps({**json.loads(j.raw), "labels": list(labels)}))


def expected_scores(judge, user_texts: list[str], scores, system: str | None, batch_size: int):
    """Expected score of free-form judge prompts (e.g. against a reference answer)."""
    asked = [(u, [ASSISTANT_PREFIX + f"{s}}}" for s in scores]) for u in user_texts]
    return [expectation(lp, False, tuple(scores)) for lp in _logprobs(judge, asked, system, batch_size)[0]]


# --- the reference judge -----------------------------------------------------------------------


def reference_judgment(response: str, answer: str | None, kind: str = "number") -> Judgment:
    """The reference judge (``judge.kind: reference``): 10 for an answer that matches its
    prompt's answer under the exact_match metric's extraction, 1 for one that does not. A
    prompt without an answer gets no score (recorded with its error, left out as any unusable
    judgment is)."""
    if answer is None or (isinstance(answer, float) and math.isnan(answer)) or str(answer).strip() == "":
        return Judgment(None, "", "no reference answer for this prompt", False)
    right = exact_match(response, str(answer), kind)
    return Judgment(10.0 if right else 1.0, json.dumps({"right": right, "answer": str(answer)}), None, False)


def reference_win_probability(score_i: float | None, score_j: float | None) -> float:
    """P(answer i beats answer j) from two reference scores: 1 right over wrong, 1/2 alike."""
    if score_i is None or score_j is None:
        return 0.5
    return 0.5 + (score_i - score_j) / 18
