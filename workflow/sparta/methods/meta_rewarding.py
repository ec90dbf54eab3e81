"""Meta-rewarding (Wu et al. 2024, "Meta-Rewarding Language Models: Self-Improving Alignment
with LLM-as-a-Meta-Judge", arXiv 2407.19594; no official training code was released: this
follows the paper's section 2; docs/methods/meta-rewarding.md gives each step).

Actor pairs as self-rewarding, with the paper's length control (section 2.2) on by default:
rho = ``baselines.length_control`` by iteration (null: :data:`LENGTH_CONTROL`). Judge pairs
(section 2.3), for each prompt of each member: the answer whose judgments vary most
(:func:`most_varied`) has N = ``baselines.meta_judgments`` judgments with reasons; the member
as meta-judge compares every two of them, stripped of their scores, in both orders (when
:func:`can_pair`); an Elo fit (:func:`elo_ratings`) ranks them, and the highest rated against
the lowest is a judge pair (``kind: judge``, the judge instruction as its prompt). Judge pairs
are capped as NVIDIA NeMo-Aligner's implementation caps them (:func:`capped_judge_pairs`; read
in nemo_aligner/experimental/self_rewarding/self_rewarding.py, branch degert/self-rewarding-trt,
commit de145a5a of 2025-05-01) and added beside the actor pairs; both train together with DPO.

In expected mode (the embedded default's ``judge.mode``) the paper's loop is open: judge
pairs train reasoned "... Score: N" judgments, but the member's own scoring in the next
iteration reads one forced verdict with no reasoning; generate mode closes it.

Deliberate differences: every member aligns alone (the paper aligns one model); the
meta-judge's verdict is the exact probability of "A" vs "B" after a forced prefix in each
order, not a generated explanation ending in "Winner: ..."; the paper corrects its Elo for
the meta-judge's position bias, ours averages that bias out by comparing every pair in both
orders; rho follows NeMo-Aligner's recipe (:data:`LENGTH_CONTROL`; the paper's own
schedule was not read from the sources available), and rho 0 breaks ties by length where
NeMo takes the answer whose judgments vary least; the paper's seed data (IFT/EFT) is not
used; ``baselines.samples`` defaults to self-rewarding's 4.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np

from ..jobs import by_base
from ..judging import RUBRICS, Judgment, judge_answers, judge_ids, meta_judge, strip_score
from ..members import MemberSpec
from .base import Round, duel_row, pair
from .self_rewarding import SelfRewarding

LENGTH_CONTROL = (0.0, 0.0, 0.1)
"""Meta-rewarding's default rho by iteration: NeMo-Aligner's recipe (see the module docstring)."""
PER_SCORE_SAMPLES = 0.2
"""NeMo-Aligner's share of the training samples given to judge pairs, spread over the scores
(``baselines.judge_pair_cap: per_score``)."""


class MetaRewarding(SelfRewarding):
    name = "meta_rewarding"
    default_samples = 4
    default_length_control = LENGTH_CONTROL
    judgment_kinds = ("score", "meta")

    def judging_warnings(self, judge, baselines) -> list[str]:
        why = no_judge_pairs(judge, baselines)
        if not why:
            return []
        return [f"meta_rewarding: no judge pair can form: {why}; the members train on actor pairs only"]

    def judge(self, run) -> None:
        asked, each, n_each = self.judge_own(run)
        rubric = RUBRICS[run.baselines.judge_prompt]
        n = run.baselines.meta_judgments
        reuse = run.cfg.mode == "generate" and n_each >= n
        # 1. per (member, duel): the answer whose judgments vary most
        chosen = _most_varied_answers(asked, each, n_each, rubric)
        # 2. its N judgments, with reasons
        if reuse:
            judgments = [each[c.position * n_each : c.position * n_each + n] for c in chosen]
        else:
            judgments = _sampled_judgments(run, asked, chosen, n, rubric)
        users = _judge_users(run, asked, chosen, rubric)
        # 3. every two judgments, stripped of their scores, in both orders
        asks, verdicts = _meta_verdicts(run, chosen, judgments, users, n, rubric)
        # 4. the Elo of each judgment; one "meta" row per re-judged answer
        for c, answer in enumerate(chosen):
            mine = [(q.first, q.second, v[0]) for q, v in zip(asks, verdicts) if q.answer == c]
            read = sum(v[1] for q, v in zip(asks, verdicts) if q.answer == c)
            judgment = _meta_judgment(users[c], answer.sample, judgments[c], mine, read, reuse=reuse)
            run.add(answer.spec.name, answer.duel, answer.spec.name, answer.sample, judgment, "meta")

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        """Actor pairs, then the judge pairs the caps keep (:func:`capped_judge_pairs`)."""
        actor = super().pair_rows(duels, responses, judgments, baselines)
        levels = len(RUBRICS[baselines.judge_prompt].points)
        per_score = baselines.judge_pair_cap == "per_score"
        prompts = duels["member_a"].value_counts().to_dict() if per_score else None  # NeMo's samples
        candidates = judge_pair_candidates(duels, judgments)
        shares = (baselines.judge_pair_share, baselines.judge_score_share)
        return actor + capped_judge_pairs(actor, candidates, *shares, levels, prompts)

    def aggregate(self, state, round_: Round, reputation, baselines):
        """As every baseline's, with the judge pairs formed and kept under the caps counted."""
        history, prefs, counts = super().aggregate(state, round_, reputation, baselines)
        counts["judge_pairs_formed"] = len(judge_pair_candidates(round_.duels, round_.judgments))
        counts["judge_pairs"] = int((prefs["kind"] == "judge").sum())
        return history, prefs, counts


# --- the steps of the judge job -----------------------------------------------------------------


@dataclass(frozen=True)
class Rejudged:
    """The answer of a (member, duel) re-judged for judge pairs: its sample and its position in
    the member's self-judgments (``asked``)."""

    spec: MemberSpec
    duel: str
    sample: int
    position: int


@dataclass(frozen=True)
class Comparison:
    """A meta-judge question: judgments ``first`` and ``second`` of re-judged answer ``answer``
    (its index among them), shown as ``texts``, stripped of their scores."""

    answer: int
    first: int
    second: int
    texts: tuple[str, str]


def _most_varied_answers(asked: list, each: list, n_each: int, rubric) -> list[Rejudged]:
    """Per (member, duel), the sample whose own judgments vary most, in the order the (member,
    duel) pairs were first asked."""
    spread: dict[tuple, dict[int, float | None]] = {}
    for i, (spec, duel, k, _) in enumerate(asked):
        samples = each[i * n_each : (i + 1) * n_each]
        if n_each >= 2:
            v = score_variance([j.score for j in samples])
        else:
            v = distribution_variance(samples[0].raw, rubric)
        spread.setdefault((spec.name, duel), {})[k] = v
    item_of = {(a[0].name, a[1], a[2]): (a[0], i) for i, a in enumerate(asked)}
    chosen = []
    for (member, duel), v in spread.items():
        k = most_varied(v)
        if k is not None:
            spec, i = item_of[(member, duel, k)]
            chosen.append(Rejudged(spec, duel, k, i))
    return chosen


def _sampled_judgments(run, asked: list, chosen: list[Rejudged], n: int, rubric) -> list[list]:
    """N sampled judgments (generate mode, with reasons) of each chosen answer, each seeded."""
    sampled = replace(run.cfg, mode="generate")
    again = [(c.spec, c.duel, c.sample, asked[c.position][3]) for c in chosen for _ in range(n)]
    texts = run.judged(
        again,
        judge_answers,
        sampled,
        lambda g: run.seed(again[g][0].name, again[g][1], again[g][2], "meta", g % n),
        rubric,
    )
    return [texts[c * n : (c + 1) * n] for c in range(len(chosen))]


def _judge_users(run, asked: list, chosen: list[Rejudged], rubric) -> list:
    """The judge's user message of each chosen answer, which the meta-judge is shown."""
    sampled = replace(run.cfg, mode="generate")
    items = [asked[c.position][3] for c in chosen]
    return [
        judge_ids(
            run.backend.serve(c.spec).tok, x.prompt, [x.response], sampled, run.system, "", rubric=rubric
        )[0]
        for c, x in zip(chosen, items)
    ]


def _meta_verdicts(run, chosen: list[Rejudged], judgments: list[list], users: list, n: int, rubric):
    """Every two judgments of a chosen answer, stripped of their scores, in both orders, judged
    by the member itself as meta-judge: the questions and their verdicts. Only where a judge
    pair can form (two judgments give different scores): elsewhere it would be dropped."""
    orders = [(a, b) for a in range(n) for b in range(n) if a != b]
    shown = [[strip_score(j.raw, rubric) for j in js] for js in judgments]
    asks = [
        Comparison(c, a, b, (shown[c][a], shown[c][b]))
        for c in range(len(chosen))
        if can_pair([j.score for j in judgments[c]])
        for a, b in orders
    ]
    verdicts = [None] * len(asks)
    for group in by_base([chosen[q.answer].spec for q in asks]):
        served = run.backend.serve_each([chosen[asks[g].answer].spec for g in group])
        users_of = [users[asks[g].answer] for g in group]
        texts = [asks[g].texts for g in group]
        for g, v in zip(group, meta_judge(served, users_of, texts, run.cfg, run.system)):
            verdicts[g] = v
    return asks, verdicts


def _meta_judgment(user, k: int, judgments: list, mine: list, read: int, *, reuse: bool) -> Judgment:
    """The "meta" row of one re-judged answer: its judgments' Elo from the meta-judge's
    verdicts ``mine`` ((a, b, p) per comparison), the spread of the Elo as its score, and the
    tokens and requests it cost (``read``: the meta-judge's prompt tokens; ``reuse``: the
    judgments are the actor's own, sampled at no extra cost)."""
    usable = [(a, b, p) for a, b, p in mine if p is not None]
    ratings = elo_ratings(len(judgments), usable) if usable else None
    why = "no meta-judge verdict" if mine else NOT_ASKED
    raw = json.dumps(
        {
            "user": user,
            "sample": k,
            "judgments": [j.raw for j in judgments],
            "scores": [j.score for j in judgments],
            "comparisons": [[a, b, p] for a, b, p in mine],
            "elo": ratings,
        }
    )
    best = None if ratings is None else elo_win(max(ratings) - min(ratings))
    sampled_cost = [] if reuse else judgments
    return Judgment(
        None if best is None else 1 + 9 * best,
        raw,
        None if ratings is not None else why,
        any(j.truncated for j in judgments),
        False,
        read + sum(j.tokens for j in sampled_cost),
        len(mine) + sum(j.requests for j in sampled_cost),
        sum(j.generated for j in sampled_cost),
    )


# --- the pieces, each checked by hand in tests/test_methods.py ----------------------------------


NOT_ASKED = (
    "meta-judge not asked: fewer than two of the judgments give different scores, so no judge pair can form"
)


def can_pair(scores: list[float | None]) -> bool:
    """Whether judgments with these scores can make a judge pair: at least two distinct usable
    scores. (At 135M most sampled judgments never write "Score: N": the study of 2026-12-03, 8 of 288.)"""
    return len({s for s in scores if s is not None}) >= 2


def score_variance(scores: list[float | None]) -> float | None:
    """Variance (population) of an answer's usable sampled judge scores; None under two."""
    usable = [s for s in scores if s is not None]
    return float(np.var(usable)) if len(usable) >= 2 else None


def distribution_variance(raw: str, rubric) -> float | None:
    """Variance of an expected-mode judgment's score distribution (its ``probs`` over the
    rubric's points, on the 1-10 scale); None when the judgment holds none."""
    try:
        probs = json.loads(raw)["probs"]
    except (ValueError, KeyError, TypeError):
        return None
    values = [rubric.scale(p) for p in rubric.points]
    if len(probs) != len(values):
        return None
    mean = sum(p * v for p, v in zip(probs, values))
    return sum(p * (v - mean) ** 2 for p, v in zip(probs, values))


def most_varied(variances: dict[int, float | None]) -> int | None:
    """The answer (sample) whose judgments vary most; the lowest sample on a tie; None when no
    answer's judgments vary (every judge pair would be dropped: the meta-judge is not asked)."""
    have = [(v, k) for k, v in variances.items() if v is not None and v > 0]
    return min(have, key=lambda vk: (-vk[0], vk[1]))[1] if have else None


def elo_win(diff: float) -> float:
    """P(win) of a rating ``diff`` Elo points above the opponent."""
    return 1 / (1 + 10 ** (-diff / 400))


def elo_ratings(n: int, outcomes: list[tuple[int, int, float]], prior: float = 1e-2) -> list[float]:
    """Elo ratings (mean 1000) of ``n`` players from ``outcomes`` (first, second, score of the
    first in [0, 1]), the maximum likelihood of Bradley-Terry P(i beats j) = 1 / (1 + 10^((r_j -
    r_i) / 400)) by Newton's method, as Chatbot Arena computes Elo; ``prior`` (a Gaussian penalty
    on the log-strengths) keeps them finite when one player wins every comparison."""
    theta = np.zeros(n)
    for _ in range(100):
        grad, hess = -prior * theta, -prior * np.eye(n)
        for i, j, s in outcomes:
            p = 1 / (1 + math.exp(theta[j] - theta[i]))
            grad[i] += s - p
            grad[j] -= s - p
            w = p * (1 - p)
            hess[i, i] -= w
            hess[j, j] -= w
            hess[i, j] += w
            hess[j, i] += w
        if prior == 0:  # the strengths are defined up to a constant: pin their mean
            hess = hess - np.ones((n, n)) / n
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    theta -= theta.mean()
    return [float(1000 + 400 / math.log(10) * t) for t in theta]


def meta_judge_pairs(duels, judgments) -> list[dict]:
    """Judge pairs of meta-rewarding before the caps: of each meta row (kind "meta"), the
    highest-rated judgment chosen and the lowest rejected; none when their ratings tie, their
    scores are equal or either has no score."""
    return [p for p, _ in judge_pair_candidates(duels, judgments)]


def judge_pair_candidates(duels, judgments) -> list[tuple[dict, float]]:
    """:func:`meta_judge_pairs` with the score each chosen judgment gives the answer, in the
    order of the duels table (the iteration's seeded prompt draw)."""
    position = {d: i for i, d in enumerate(duels["duel_id"])}
    meta_rows = judgments[judgments["kind"] == "meta"]
    rows = sorted(
        meta_rows.itertuples(index=False), key=lambda j: (position.get(j.duel_id, len(position)), j.sample)
    )
    pairs = []
    for j in rows:
        meta = json.loads(j.raw)
        elo = meta.get("elo")
        if not elo:  # no verdict (or a row written before the Elo ranking)
            continue
        texts, scores = meta["judgments"], meta["scores"]
        hi = max(range(len(elo)), key=lambda i: (elo[i], -i))
        lo = min(range(len(elo)), key=lambda i: (elo[i], i))
        if None in (scores[hi], scores[lo]):  # a judgment without a score teaches no verdict
            continue
        if elo[hi] == elo[lo] or scores[hi] == scores[lo] or texts[hi] == texts[lo]:
            continue
        p = elo_win(elo[hi] - elo[lo])
        made = pair(
            duel_row(duels, j.duel_id),
            j.judge,
            texts[hi],
            texts[lo],
            1 + 9 * p,
            1 + 9 * (1 - p),
            kind="judge",
            prompt=meta["user"],
        )
        pairs.append((made, float(scores[hi])))
    return pairs


def max_judge_pairs(actor: int, share: float) -> int | None:
    """The most judge pairs J beside ``actor`` actor pairs with J <= share x (actor + J);
    None: no cap (share 1)."""
    if share >= 1:
        return None
    return math.floor(share * actor / (1 - share) + 1e-9)


def capped_judge_pairs(
    actor: list[dict],
    judge: list[tuple[dict, float]],
    share: float,
    score_share: float,
    levels: int,
    prompts: dict[str, int] | None = None,
) -> list[dict]:
    """The judge pairs each trainee keeps under NeMo-Aligner's caps, in the order given
    (``judge``: (pair, the score its chosen judgment gives the answer), in the iteration's
    prompt order):

    1. the score cap (``meta_max_relative_pcnt``): a pair is kept only while the share of its
       chosen score among the kept pairs' chosen scores, each of the judge scale's ``levels``
       scores counted once more, is under ``score_share``: (n_s + 1) / (n + levels) <
       score_share before it is added (NeMo: ``cnt_tracker`` starts at one per score);
    2. without ``prompts`` (``judge_pair_cap: share``, the default), the share cap
       (``meta_judge_pcnt``): of those, the first J with J <= ``share`` x (actor pairs + J),
       the trainee's actor pairs counted without those of one text twice (which DPO drops);
    3. with ``prompts`` (``judge_pair_cap: per_score``: per trainee, its prompts N of the
       iteration), instead NeMo's per-score limit beside the score cap, n_s + 1 < floor(0.2 N
       / (levels - 1)) before a pair is added (none passes below 2 x 5 / 0.2 = 50 prompts on
       the additive scale), and of those the first max(N - actor pairs, floor(``share`` x N)).
    """
    kept = []
    for member in dict.fromkeys(p["trainee"] for p, _ in judge):
        n = None if prompts is None else prompts.get(member, 0)
        limit = math.inf if n is None else int(PER_SCORE_SAMPLES * n / (levels - 1))
        counts: dict[float, int] = {}
        admitted = []
        for p, s in judge:
            if p["trainee"] != member:
                continue
            key = round(s, 6)
            mine = counts.get(key, 0) + 1
            if mine / (sum(counts.values()) + levels) < score_share and mine < limit:
                admitted.append(p)
                counts[key] = mine
        a = sum(1 for p in actor if p["trainee"] == member and p["chosen"] != p["rejected"])
        most = max_judge_pairs(a, share) if n is None else max(n - a, math.floor(share * n + 1e-9))
        kept += admitted if most is None else admitted[:most]
    return kept


def no_judge_pairs(judge, baselines) -> str | None:
    """Why no judge pair can ever form under these judge and baseline settings (None: they
    can): judge pairs need two of an answer's sampled judgments to give different scores."""
    if judge.kind == "reference":
        return None  # refused by the config check
    if judge.temperature <= 0 or judge.top_k == 1:
        return (
            "judge sampling is greedy (judge.temperature 0 or judge.top_k 1): every sampled judgment "
            "of an answer is the same, so none gives a different score"
        )
    if judge.mode == "generate" and baselines.judge_samples < 2:
        return (
            "in generate mode the answer re-judged is the one whose baselines.judge_samples sampled "
            "scores vary most, and one judgment each (judge_samples: 1) never varies; set "
            "judge_samples to 2 or more (the paper: 3)"
        )
    return None
