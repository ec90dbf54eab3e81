"""Cross-judging: the judge prompts, the defences against answers that address the judge,
the parse cascades and the expected-score mode.

Two formats. ``pointwise`` (the paper, the authors): the judge scores each answer of a duel
alone, 1-10. ``pairwise``: the judge sees both answers and says which is better; it is asked
in both orders (position bias cancels), and P(a better) becomes the pair of scores
1 + 9 P and 10 - 9 P, so a duel's score gap is 9 (2 P - 1): the units of the pointwise gap.

Two modes. ``generate`` samples the judge's text and parses it (JSON first, then a cascade
of patterns; the authors' way). ``expected`` forces the start of the answer (``{"score": ``
or ``{"better": "``) and reads the exact probability of every candidate continuation, so a
small judge always gives a usable, graded verdict without sampling.

Defences, each a switch (``judge.plain_text``, ``judge.sanitize``, ``judge.fence``) recorded
on every judgment: an answer's special-token strings stay plain text (never control tokens);
score-like text and notes addressed to the judge are replaced by a marker before judging
(the stored answer is never changed); the answer is fenced so it cannot close its block.

Truncation never cuts the instruction or the forced prefix: only the answers are shortened,
and the judgment records ``truncated``.

Pure: a judge is a served member (:class:`sparta.backends.Served`); only its tokenizer and
its two primitives are used here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from .chat import chat_ids
from .settings import JudgeSettings

JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the response to the "
    "instruction below. Consider whether it is correct, helpful, relevant and clear. Rate it "
    "on a scale of 1 to 10, where 1 is the worst and 10 is the best.\n\n"
    "[Instruction]\n{prompt}\n\n[Response]\n{response}\n[End of response]\n\n"
    'Output only a JSON object of the form {{"score": N}}, where N is an integer from 1 to 10.'
)
PAIRWISE_PROMPT = (
    "Please act as an impartial judge and compare the two responses to the instruction below. "
    "Consider which one is more correct, helpful, relevant and clear; their order and length "
    "do not matter.\n\n"
    "[Instruction]\n{prompt}\n\n[Response A]\n{a}\n[End of response A]\n\n"
    "[Response B]\n{b}\n[End of response B]\n\n"
    'Output only a JSON object of the form {{"better": "A"}} or {{"better": "B"}}.'
)
ASSISTANT_PREFIX = '{"score": '
PAIRWISE_PREFIX = '{"better": "'
SCORES = tuple(range(1, 11))
ADDITIVE_PROMPT = (
    "Review the user's question and the response below, and score the response with the "
    "additive 5-point system described here. Points add up for each criterion the response "
    "meets:\n"
    "- Add 1 point if the response is relevant and gives some information related to the "
    "question, even if it is incomplete or contains some irrelevant content.\n"
    "- Add a 2nd point if it addresses a substantial part of the question but does not answer "
    "it completely or directly.\n"
    "- Add a 3rd point if it answers the basic elements of the question in a useful way, "
    "whether or not it reads like an AI assistant's answer or a search result.\n"
    "- Add a 4th point if it is written clearly from an AI assistant's perspective, addresses "
    "the question directly and comprehensively, and is well organized and helpful, even with "
    "slight room for more clarity, conciseness or focus.\n"
    "- Add a 5th point if it is impeccably tailored to the question by an AI assistant, without "
    "extraneous information, and shows expert knowledge in an engaging, insightful answer.\n\n"
    "[Question]\n{prompt}\n\n[Response]\n{response}\n[End of response]\n\n"
    "After examining the question and the response, briefly justify your total score in up to "
    '100 words, then conclude with the score in the form "Score: <total points>".'
)


@dataclass(frozen=True)
class Rubric:
    """How a pointwise judge is asked and read: its prompt ({prompt}, {response}), the forced
    assistant prefix and the candidate verdicts of expected mode, and its points, mapped onto
    the 1-10 scale every table uses (1 + 9 (points - lowest) / (highest - lowest))."""

    name: str
    template: str
    prefix: str
    candidate_suffix: str
    points: tuple[int, ...]

    def scale(self, points: float) -> float:
        lo, hi = self.points[0], self.points[-1]
        return 1 + 9 * (points - lo) / (hi - lo)

    def parse(self, text: str) -> tuple[float | None, str | None]:
        """Score on the 1-10 scale from a generated judgment, or (None, what went wrong)."""
        if self.name == "sparta":
            return parse_score(text)
        found = re.findall(r"\bscore\s*[:=]\s*\**\s*(\d+(?:\.\d+)?)", text, re.I)
        if not found:
            return None, 'no "Score: N" in judge output'
        points = float(found[-1])  # the conclusion: the last one
        if not self.points[0] <= points <= self.points[-1]:
            return None, f"score {points:g} is outside {self.points[0]}-{self.points[-1]}"
        return self.scale(points), None


SPARTA_RUBRIC = Rubric("sparta", "", ASSISTANT_PREFIX, "}", SCORES)
"""Sparta's judge (the authors'): a 1-10 score as a JSON object."""
ADDITIVE_RUBRIC = Rubric("additive", ADDITIVE_PROMPT, "Score: ", "", (0, 1, 2, 3, 4, 5))
"""Self-rewarding's LLM-as-a-judge prompt (Yuan et al. 2024, fig. 2): five criteria, a point
each, a short justification, "Score: N"; in expected mode the justification is skipped (the
answer starts with "Score: ")."""
RUBRICS = {r.name: r for r in (SPARTA_RUBRIC, ADDITIVE_RUBRIC)}
TRUNCATION_MARK = " [...]"
REMOVED = "[removed]"


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
    sanitized: bool = False
    tokens: int = 0
    """Prompt tokens the judge read for this answer (a pairwise comparison's are shared)."""


# --- defences ---------------------------------------------------------------------------------

_NUM = r"(?:10|[0-9])(?:\.\d+)?"
_SCORE_LIKE = [
    # {"score": 10}, {'rating': 9}, "score": 10
    re.compile(r"\{[^{}]{0,40}\b(?:score|rating|grade|verdict|better)\b[^{}]{0,40}\}", re.I),
    re.compile(r"[\"']?\b(?:score|rating|grade)[\"']?\s*[:=]\s*[\"']?" + _NUM + r"\b(?:\s*/\s*10\b)?", re.I),
    # "Score: 10/10", "rated 10 out of 10", "10/10" (not inside arithmetic: no operator around)
    re.compile(
        r"(?<![\d.+\-*/=]\s)(?<![\d.+\-*/=])\b" + _NUM + r"\s*(?:/|out of)\s*10\b(?!\s*[+\-*/=])", re.I
    ),
    re.compile(r"\b(?:score|rate|rating|grade)\b[^.\n]{0,20}\b(?:is|of|:)\s*" + _NUM + r"\b", re.I),
]
_TO_THE_JUDGE = [
    # a bracketed or parenthesised note addressed to the judge, evaluator, grader, reviewer
    re.compile(
        r"[\[(][^\])\n]{0,200}\b(?:judge|evaluator|grader|reviewer|assessor)s?\b[^\])\n]{0,300}[\])]", re.I
    ),
    # a sentence or line addressed to the judge, or telling it what to do
    re.compile(
        r"(?:^|(?<=[.!?\n]))[^.!?\n]{0,80}\b(?:note to the (?:judge|evaluator|grader)"
        r"|dear (?:judge|evaluator|grader)|(?:judge|evaluator|grader|reviewer)s?\s*[:,])[^\n]{0,300}",
        re.I | re.M,
    ),
    re.compile(
        r"[^.!?\n]{0,80}\bignore (?:all |the )?(?:previous|above|prior) instructions?\b[^\n]{0,300}", re.I
    ),
]
_BLOCK_MARKERS = re.compile(r"\[(?:end of )?(?:instruction|response(?: [ab])?)\]", re.I)


def suspicious(text: str) -> bool:
    """Whether ``text`` holds score-like text or a note addressed to the judge (what an answer
    could use to talk a judge into a higher score)."""
    return any(p.search(text) for p in (*_SCORE_LIKE, *_TO_THE_JUDGE))


def sanitize(text: str) -> tuple[str, bool]:
    """``text`` with score-like text and notes addressed to the judge replaced by a marker;
    and whether anything was replaced."""
    out = text
    for pattern in (*_TO_THE_JUDGE, *_SCORE_LIKE):
        out = pattern.sub(REMOVED, out)
    return out, out != text


def fence(text: str) -> str:
    """``text`` inside a fence it cannot close: a run of backticks longer than any in it, and
    the prompt's own block markers ([Response], [End of response], ...) made inert."""
    text = _BLOCK_MARKERS.sub(lambda m: "(" + m.group(0)[1:-1] + ")", text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}\n{text}\n{bar}"


def reference_judgment(response: str, answer: str | None, kind: str = "number") -> Judgment:
    """The reference judge (``judge.kind: reference``): 10 for an answer that matches its
    prompt's answer under the exact_match metric's extraction, 1 for one that does not. A
    prompt without an answer gets no score (recorded with its error, left out as any unusable
    judgment is)."""
    import json
    import math

    from .metrics import exact_match

    if answer is None or (isinstance(answer, float) and math.isnan(answer)) or str(answer).strip() == "":
        return Judgment(None, "", "no reference answer for this prompt", False)
    right = exact_match(response, str(answer), kind)
    return Judgment(10.0 if right else 1.0, json.dumps({"right": right, "answer": str(answer)}), None, False)


def reference_win_probability(score_i: float | None, score_j: float | None) -> float:
    """P(answer i beats answer j) from two reference scores: 1 right over wrong, 1/2 alike."""
    if score_i is None or score_j is None:
        return 0.5
    return 0.5 + (score_i - score_j) / 18


def defences(cfg: JudgeSettings) -> str:
    """The defences a judgment was made with, as recorded in the judgments table ("reference"
    for the reference judge, which reads no text as instructions)."""
    if cfg.kind == "reference":
        return "reference"
    on = [
        name
        for name, flag in (("plain_text", cfg.plain_text), ("sanitize", cfg.sanitize), ("fence", cfg.fence))
        if flag
    ]
    return ",".join(on) or "none"


# --- prompts -----------------------------------------------------------------------------------


def _prepared(response: str, cfg: JudgeSettings) -> tuple[str, bool]:
    return sanitize(response) if cfg.sanitize else (response, False)


def _fill(prompt: str, answers: list[str], cfg: JudgeSettings, rubric: Rubric = SPARTA_RUBRIC) -> str:
    shown = [fence(a) if cfg.fence else a for a in answers]
    if len(shown) == 1:
        return (rubric.template or JUDGE_PROMPT).format(prompt=prompt, response=shown[0])
    return PAIRWISE_PROMPT.format(prompt=prompt, a=shown[0], b=shown[1])


def judge_ids(
    tok,
    prompt: str,
    answers: list[str],
    cfg: JudgeSettings,
    system: str | None,
    prefix: str,
    rubric: Rubric = SPARTA_RUBRIC,
) -> tuple[str, list[int], bool]:
    """The judge's user message and prompt ids (chat template + forced prefix) within
    ``cfg.max_length`` tokens, for one answer (pointwise) or two (pairwise); and whether
    answers were shortened.

    Only the answers are ever shortened (from their ends, all alike), so the instruction and
    the prefix always survive. Raises if even empty answers do not fit."""

    def build(parts: list[str]) -> tuple[str, list[int]]:
        user = _fill(prompt, parts, cfg, rubric)
        return user, chat_ids(tok, user, system, prefix, plain=cfg.plain_text)

    user, ids = build(answers)
    if len(ids) <= cfg.max_length:
        return user, ids, False
    tokens = [tok(a, add_special_tokens=False, split_special_tokens=True)["input_ids"] for a in answers]
    keep = max(0, max(len(t) for t in tokens) - (len(ids) - cfg.max_length) // len(answers) - 8)
    while True:
        cut = [tok.decode(t[:keep]) + TRUNCATION_MARK if len(t) > keep else tok.decode(t) for t in tokens]
        user, ids = build(cut)
        if len(ids) <= cfg.max_length:
            return user, ids, True
        if keep == 0:
            raise ValueError(
                f"judge.max_length {cfg.max_length} is too small for the instruction and prompt alone; "
                "raise judge.max_length"
            )
        keep = max(0, keep - max(1, (len(ids) - cfg.max_length) // len(answers)))


def candidate_ids(full: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Shared prompt ids and each candidate's continuation, from the ids of the prompt with
    each candidate appended (tokenized together, so a merge across the boundary, or "10"
    split into "1" "0", is scored exactly)."""
    common = 0
    while all(len(f) > common for f in full) and len({f[common] for f in full}) == 1:
        common += 1
    return full[0][:common], [f[common:] for f in full]


# --- parsing ------------------------------------------------------------------------------------

_PATTERNS = [
    ("json key", re.compile(r'"score"\s*:\s*"?(-?\d+(?:\.\d+)?)')),
    ("score label", re.compile(r"\bscore\s*(?:is|[:=])?\s*(-?\d+(?:\.\d+)?)", re.I)),
    ("fraction", re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", re.I)),
]
_WINNER = [
    re.compile(r'"better"\s*:\s*"?\s*\[?([AB])\b', re.I),
    re.compile(r"\[\[([AB])\]\]"),
    re.compile(r"\b(?:response|answer|assistant)\s+([AB])\s+is\s+(?:better|superior|preferred)", re.I),
    re.compile(r"\bbetter\b[^A-Za-z]{0,10}(?:response\s+|answer\s+)?([AB])\b", re.I),
    re.compile(r"^\s*\W{0,3}([AB])\W{0,3}\s*$"),
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


def parse_winner(text: str) -> tuple[str | None, str | None]:
    """ "A" or "B" from a pairwise judge's text (JSON first, then a cascade of patterns), or
    (None, what went wrong)."""
    for pattern in _WINNER:
        m = pattern.search(text)
        if m:
            return m.group(1).upper(), None
    return None, "no verdict (A or B) found in judge output"


# --- judging ------------------------------------------------------------------------------------


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
    """Judge duels: ``items`` holds each duel's two answers in turn (a, b, a, b, ...), and
    ``judge`` serves one request per item (the member judging it). Returns one Judgment per
    item: the score of that answer on the 1-10 scale, in either format and mode. ``seeds``
    (one per item) seed the sampling of mode generate.

    Each duel makes two requests: each answer alone (pointwise), or both answers in both
    orders (pairwise). ``rubric``: how a pointwise judge is asked and read."""
    if len(items) % 2:
        raise ValueError("items come in pairs: the two answers of each duel")
    pairs = cfg.format == "pairwise"
    prefix = (PAIRWISE_PREFIX if pairs else rubric.prefix) if cfg.mode == "expected" else ""
    built, sanitized = [], []
    for a, b in zip(items[0::2], items[1::2]):
        (ya, sa), (yb, sb) = _prepared(a.response, cfg), _prepared(b.response, cfg)
        for shown in ([ya, yb], [yb, ya]) if pairs else ([ya], [yb]):
            built.append(judge_ids(judge.tok, a.prompt, shown, cfg, system, prefix, rubric))
        sanitized += [sa, sb]
    if not built:
        return []
    cut = [c for _, _, c in built]
    read = [len(ids) for _, ids, _ in built]
    if pairs:  # both orders read both answers: each answer is charged half
        read = [(read[k - k % 2] + read[k - k % 2 + 1]) // 2 for k in range(len(read))]
    if cfg.mode == "expected":
        candidates = (
            ('A"}', 'B"}') if pairs else tuple(f"{s}{rubric.candidate_suffix}" for s in rubric.points)
        )
        prepared = [
            candidate_ids(
                [chat_ids(judge.tok, user, system, prefix + c, plain=cfg.plain_text) for c in candidates]
            )
            for user, _, _ in built
        ]
        logps = judge.continuation_logprobs(
            [p for p, _ in prepared], [c for _, c in prepared], cfg.batch_size
        )
    else:
        outs = judge.generate(
            [ids for _, ids, _ in built], cfg.sampling, list(seeds), cfg.batch_size, "judge"
        )
    result: list[Judgment] = []
    for k in range(0, len(built), 2):
        if cfg.mode == "expected" and not pairs:
            scaled = tuple(rubric.scale(s) for s in rubric.points)
            pair = (expectation(logps[k], cut[k], scaled), expectation(logps[k + 1], cut[k + 1], scaled))
        elif cfg.mode == "expected":
            pa, probs_ab, _ = _expectation(logps[k], (1.0, 0.0))  # order (a, b): P("A")
            pb, probs_ba, _ = _expectation(logps[k + 1], (0.0, 1.0))  # order (b, a): P("B")
            raw = json.dumps({"ab": [round(p, 6) for p in probs_ab], "ba": [round(p, 6) for p in probs_ba]})
            p_a = None if pa is None or pb is None else (pa + pb) / 2
            pair = _pairwise(p_a, raw, cut[k] or cut[k + 1])
        elif not pairs:
            pair = tuple(_parsed(outs[j].text, cut[j], rubric) for j in (k, k + 1))
        else:
            votes = []
            for out, a_is in ((outs[k], "A"), (outs[k + 1], "B")):
                winner, _ = parse_winner(out.text)
                if winner is not None:
                    votes.append(1.0 if winner == a_is else 0.0)
            raw = json.dumps({"ab": outs[k].text, "ba": outs[k + 1].text})
            pair = _pairwise(sum(votes) / len(votes) if votes else None, raw, cut[k] or cut[k + 1])
        result += [_flag(pair[0], sanitized[k], read[k]), _flag(pair[1], sanitized[k + 1], read[k + 1])]
    return result


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


META_PROMPT = (
    "Please act as an impartial meta-judge. Below are an instruction given to a judge, and two "
    "judgments the judge wrote. Which judgment is more accurate, better reasoned and more "
    "faithful to the instruction?\n\n[Instruction to the judge]\n{user}\n\n[Judgment A]\n{a}\n"
    "[End of judgment A]\n\n[Judgment B]\n{b}\n[End of judgment B]\n\n"
    'Output only a JSON object of the form {{"better": "A"}} or {{"better": "B"}}.'
)


def meta_judge(judge, users: list[str], pairs: list[tuple[str, str]], cfg: JudgeSettings, system) -> list:
    """P(the first judgment is better) of each pair of judgments, asked in both orders (the
    meta-judge of Meta-Rewarding, in expected mode); None where it has no verdict. ``judge``
    serves two requests per pair."""
    prompts, conts = [], []
    for user, (a, b) in zip(users, pairs):
        shown = [fence(x) if cfg.fence else x for x in (a, b)]
        for first, second in ((shown[0], shown[1]), (shown[1], shown[0])):
            text = META_PROMPT.format(user=user, a=first, b=second)
            full = [
                chat_ids(judge.tok, text, system, PAIRWISE_PREFIX + c, plain=cfg.plain_text)
                for c in ('A"}', 'B"}')
            ]
            p, c = candidate_ids(full)
            prompts.append(p)
            conts.append(c)
    logps = judge.continuation_logprobs(prompts, conts, cfg.batch_size) if prompts else []
    out = []
    for k in range(0, len(logps), 2):
        p1, _, _ = _expectation(logps[k], (1.0, 0.0))
        p2, _, _ = _expectation(logps[k + 1], (0.0, 1.0))
        out.append(None if p1 is None or p2 is None else (p1 + p2) / 2)
    return out


def _parsed(text: str, truncated: bool, rubric: Rubric = SPARTA_RUBRIC) -> Judgment:
    score, error = rubric.parse(text)
    return Judgment(score, text, error, truncated)


def _pairwise(p_a: float | None, raw: str, truncated: bool) -> tuple[Judgment, Judgment]:
    """The pointwise-scale scores of both answers from P(a better)."""
    if p_a is None:
        error = "no usable verdict in either order"
        return Judgment(None, raw, error, truncated), Judgment(None, raw, error, truncated)
    return Judgment(1 + 9 * p_a, raw, None, truncated), Judgment(10 - 9 * p_a, raw, None, truncated)


def _flag(j: Judgment, sanitized: bool, tokens: int) -> Judgment:
    return Judgment(j.score, j.raw, j.error, j.truncated, sanitized, tokens)


def expected_scores(judge, user_texts: list[str], scores, system: str | None, batch_size: int):
    """Expected score of free-form judge prompts (e.g. against a reference answer)."""
    tok = judge.tok
    prepared = [
        candidate_ids([chat_ids(tok, u, system, ASSISTANT_PREFIX + f"{s}}}") for s in scores])
        for u in user_texts
    ]
    logps = judge.continuation_logprobs([p for p, _ in prepared], [c for _, c in prepared], batch_size)
    return [expectation(lp, False, tuple(scores)) for lp in logps]
