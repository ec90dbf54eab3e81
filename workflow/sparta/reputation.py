"""The reputation update (paper Eq. 1) of a duel and down-weighting (appendix C.1); a round's
judgments become duels settled here and preference pairs in :mod:`sparta.aggregation`. (The
literal sequential loop of Algorithm 1, the reference the staged workflow is tested against,
lives beside the tests: tests/reference.py.)

Pure Python and numpy: no model, no heavy import. Every constant is a field of
:class:`ReputationSettings`; its defaults are the authors' code's values, and
``ReputationSettings.preset("paper")`` follows the paper's text instead.

Eq. (1), for a duel of members i and i' with aggregated scores s_i and s_i'::

    R_i <- max(floor, R_i + kappa_n * (s_i - s_i') * tanh(sigma_i)
                           * max(|Phi(z_i) - Phi(z_i')|, eps) / scale)
    z_i = (R_i - R_i') / sqrt(sigma_i^2 + sigma_i'^2),  z_i' = -z_i

with kappa_n = max(kappa_min, kappa_start * kappa_decay ** (n / kappa_decay_steps)), n the
1-based count of verdicts so far in the iteration (this duel included), as the authors'
code counts. Both members are updated from their pre-duel values. The change actually
applied (after the floor) joins the member's window of recent deltas; once the window holds
``min_deltas`` or more, sigma = max(std(window, ddof), sigma_min).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from . import fields
from .fields import setting
from .matchmaking import check_pool

_SQRT2 = math.sqrt(2.0)
ADDED_RANDOM_LABELS = "random_labels null arm"
ADDED_MIN_GAP = "one tie rule across methods"
"""What added ``reputation.labels`` and ``labels_seed`` (``setting(added=...)``)."""


class AggregationError(ValueError):
    """Judgments or duels that do not fit the pool or each other."""


@dataclass(frozen=True)
class ReputationSettings:
    """Eq. (1) and down-weighting: the constants and choices of the reputation system.
    Defaults (preset ``sparta``): the authors' code's constants where the paper gives none,
    the paper's algorithm where it is explicit (down-weighting of judges from iteration 2,
    both combatants updated from their pre-duel values). Preset ``authors`` is their code
    throughout, ``paper`` its text; any key overrides the preset."""

    kappa_start: float = setting(
        10.0,
        ge=0,
        le=1000,
        help="K0, kappa at the start of an iteration (authors 10; paper kappa = 1).",
        constant="kappa start K0",
        source="authors' code",
    )
    kappa_min: float = setting(
        5.0,
        ge=0,
        le=1000,
        help="K_min, kappa never decays below it (authors 5).",
        constant="kappa floor K_min",
        source="authors' code",
    )
    kappa_decay: float = setting(
        0.9,
        gt=0,
        le=1,
        help="kappa_n = max(K_min, K0 * decay^(n / decay_steps)) (authors 0.9).",
        constant="kappa decay",
        shown="0.9 per `decay_steps` duels",
        source="authors' code",
    )
    kappa_decay_steps: float = setting(
        10.0,
        gt=0,
        le=1_000_000,
        help="Duels per decay step (authors 10).",
        constant="kappa decay steps",
        source="authors' code",
    )
    kappa_restart_each_iteration: bool = setting(
        True,
        help="The duel counter n restarts every iteration (authors true).",
        constant="kappa restarts each iteration",
        source="authors' code",
    )
    scale: float = setting(
        20.0,
        ge=0.01,
        le=10000,
        help="Divisor of every update (authors 20; paper 1).",
        constant="update divisor",
        source="authors' code",
        paper="1 (none)",
    )
    eps: float = setting(
        0.01,
        ge=0,
        le=1,
        help="Lower bound of |Phi(z_i) - Phi(z_j)| (authors 0.01).",
        constant="eps (floor of the Phi term)",
        source="authors' code",
    )
    window: int = setting(
        10,
        ge=2,
        help="N, the deviation is the std of the last N reputation changes, per duel (authors 10).",
        constant="deviation window N",
        shown="10 changes, per duel",
        source="authors' code (the paper's text: per iteration)",
    )
    window_scope: Literal["run", "iteration"] = setting(
        "run",
        help="run: the window of recent changes carries across iterations; iteration: it starts "
        "empty every iteration and only the deviation carries over (authors).",
        constant="window of changes",
        shown="carried across iterations",
        source='paper ("recent iterations")',
        authors="starts empty every iteration, sigma carries over",
    )
    sigma_min: float = setting(
        0.1,
        ge=0.001,
        le=1000,
        help="Lower bound of the deviation (authors 0.1).",
        constant="sigma_min",
        source="authors' code",
    )
    ddof: Literal[0, 1] = setting(
        0,
        help="Delta degrees of freedom of that std (authors 0, numpy; paper 1).",
        constant="std ddof",
        shown="0 (numpy)",
        source="authors' code",
        paper="1 (N - 1)",
    )
    min_deltas: int = setting(
        2,
        ge=1,
        help="Changes needed before the deviation is recomputed; more than ddof (authors 2).",
        constant="deltas before sigma is recomputed",
        source="authors' code",
    )
    floor: float = setting(
        10.0,
        ge=0,
        le=1_000_000,
        help="Reputations never go below it (authors 10).",
        constant="reputation floor",
        source="authors' code",
    )
    initial_reputation: float = setting(
        100.0,
        gt=0,
        le=1_000_000,
        help="Everyone starts here; at least the floor (authors 100).",
        constant="initial reputation",
        source="authors' code",
    )
    initial_deviation: float = setting(
        0.5,
        ge=0.001,
        le=1000,
        help="Everyone starts with this deviation (authors 0.5).",
        constant="initial deviation",
        source="authors' code",
    )
    updates: bool = setting(
        True, help="Ablation 'w/o reputation updates' when false: every reputation stays initial."
    )
    downweighting: bool = setting(
        True, help="Appendix C.1 judge down-weighting; false is the ablation 'w/o downweighting'."
    )
    labels: Literal["judged", "random"] = setting(
        "judged",
        help="judged: a won duel's pair has the winner's answer chosen (Sparta). random: the null "
        "arm random_labels, each pair's chosen and rejected swapped by a coin seeded by (labels_seed, "
        "iteration, duel): the labels carry no information while the pairs' texts and count, the "
        "reputations, the training and the selection stay Sparta's.",
        added=ADDED_RANDOM_LABELS,
    )
    labels_seed: int | None = setting(
        None,
        ge=0,
        le=2147483647,
        help="Seed of the labels: random coin; null: the run's seed.",
        added=ADDED_RANDOM_LABELS,
    )
    min_gap: float = setting(
        0.0,
        ge=0,
        le=9,
        help="A duel whose two weighted scores differ by less than this (on the judges' 1-10 scale) "
        "is a tie: no preference pair; Eq. (1) still moves the reputations by the scores. 0: only equal "
        "scores tie, as in the paper. A study that compares Sparta with the baselines sets it to "
        "baselines.min_margin, so that every method drops near-equal pairs alike.",
        added=ADDED_MIN_GAP,
    )
    downweight_gamma: float = setting(
        0.1,
        ge=0,
        le=1,
        help="Appendix C.1 gamma: the j-th member down-weighted (0-based) gets weight gamma * j.",
        constant="down-weighting gamma",
        source="paper C.1",
    )
    downweight_start: int = setting(
        2,
        ge=1,
        help="First iteration (1-based) that down-weights a member (paper 2; authors 3).",
        constant="down-weighting from iteration",
        source="paper C.1",
        authors="3 (their index 2)",
    )
    downweight_max: int | None = setting(
        None,
        ge=0,
        help="Cap on members ever down-weighted (null: one more every iteration, as the paper; authors 6).",
        constant="max members down-weighted",
        shown="none: one more every iteration",
        source="paper C.1",
        authors="6 (frozen after their index 7)",
    )
    downweight_target: Literal["judge", "combatant"] = setting(
        "judge",
        help="judge: the weight lowers the member's say as a judge (paper C.1); combatant: it "
        "multiplies the scores the member receives in its own duels, for the update only, and "
        "judges weigh by reputation alone (authors).",
        constant="down-weighting applies to",
        shown="the member as a judge",
        source="paper C.1",
        authors="the scores it receives as a combatant (update only)",
    )
    sequential_update: bool = setting(
        False,
        help="false: both combatants are updated from their pre-duel values (paper); true: the "
        "second one's z uses the first one's new reputation (authors).",
        constant="second combatant's z",
        shown="from pre-duel values (both)",
        source="paper",
        authors="uses the first one's new reputation",
    )

    def __post_init__(self):
        problems = fields.problems(self)  # bounds and choices, as the config schema says
        if self.min_deltas < self.ddof + 1:
            problems.append(f"min_deltas must be > ddof, got {self.min_deltas}")
        if self.initial_reputation < self.floor:
            problems.append(
                f"initial_reputation ({self.initial_reputation}) is below the floor ({self.floor})"
            )
        if problems:
            raise ValueError("reputation settings: " + "; ".join(problems))

    @classmethod
    def preset(cls, name: str = "sparta", **overrides) -> ReputationSettings:
        """``sparta`` (the defaults), ``authors`` (their code throughout) or ``paper`` (its
        text: kappa = 1, no divisor, ddof 1); keyword overrides win over the preset."""
        if name not in PRESETS:
            raise ValueError(f"unknown reputation preset {name!r}; choose one of {sorted(PRESETS)}")
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown reputation setting(s) {sorted(unknown)}")
        return cls(**{**PRESETS[name], **overrides})


# The name workflow/scripts/init_state.py imports: editing that script would make Snakemake
# rerun init_state, and so everything after it, in every run finished before the rename.
ReputationParams = ReputationSettings


PRESETS: dict[str, dict] = {
    "sparta": {},
    # src1/rating_system.py's static mode: down-weighting from their iteration index 2 (the
    # 3rd), frozen after index 7 (six members), applied to the scores a member receives;
    # a fresh window of deltas each iteration; the second combatant sees the first's update
    "authors": {
        "downweight_start": 3,
        "downweight_max": 6,
        "downweight_target": "combatant",
        "window_scope": "iteration",
        "sequential_update": True,
    },
    "paper": {"kappa_start": 1.0, "kappa_min": 1.0, "scale": 1.0, "ddof": 1},
}


def kappa(n: int, params: ReputationSettings) -> float:
    """kappa for the n-th verdict (1-based) of an iteration."""
    decayed = params.kappa_start * params.kappa_decay ** (n / params.kappa_decay_steps)
    return max(params.kappa_min, decayed)


@dataclass
class PoolState:
    """Live reputation state of the pool; mutated in place by :func:`update`."""

    members: list[str]
    reputation: list[float]
    deviation: list[float]
    weight: list[float]
    downweighted_at: list[int | None]
    deltas: list[list[float]]
    duels_this_iteration: int = 0
    iteration: int = 0
    round: int = -1
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self):
        self.index = {m: i for i, m in enumerate(self.members)}

    @classmethod
    def initial(cls, members: Sequence[str], params: ReputationSettings) -> PoolState:
        members = check_pool(members)
        m = len(members)
        return cls(
            members=members,
            reputation=[float(params.initial_reputation)] * m,
            deviation=[float(params.initial_deviation)] * m,
            weight=[1.0] * m,
            downweighted_at=[None] * m,
            deltas=[[] for _ in range(m)],
        )

    def reputations(self) -> dict[str, float]:
        return dict(zip(self.members, self.reputation, strict=True))

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "iteration": self.iteration,
                "round": self.round,
                "member": self.members,
                "reputation": self.reputation,
                "deviation": self.deviation,
                "judge_weight": self.weight,
                "downweighted_at": pd.array(self.downweighted_at, dtype="Int32"),
                "recent_deltas": [list(d) for d in self.deltas],
                "duels_this_iteration": self.duels_this_iteration,
            }
        )

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> PoolState:
        if len(df) == 0:
            raise AggregationError("the state table is empty")
        dw = [None if pd.isna(x) else int(x) for x in df["downweighted_at"]]
        return cls(
            members=[str(m) for m in df["member"]],
            reputation=[float(x) for x in df["reputation"]],
            deviation=[float(x) for x in df["deviation"]],
            weight=[float(x) for x in df["judge_weight"]],
            downweighted_at=dw,
            deltas=[[float(v) for v in d] for d in df["recent_deltas"]],
            duels_this_iteration=int(df["duels_this_iteration"].iloc[0]),
            iteration=int(df["iteration"].iloc[0]),
            round=int(df["round"].iloc[0]),
        )


def begin_iteration(state: PoolState, iteration: int, params: ReputationSettings) -> PoolState:
    """Start iteration ``iteration`` (1-based): restart kappa and apply appendix C.1: from
    ``downweight_start`` on, the lowest-reputation member not yet down-weighted gets judge weight
    gamma * (members down-weighted before it), kept from then on. Idempotent per iteration."""
    if iteration != state.iteration:
        state.iteration = iteration
        state.round = -1
        if params.kappa_restart_each_iteration:
            state.duels_this_iteration = 0
        if params.window_scope == "iteration":
            state.deltas = [[] for _ in state.members]  # the deviation itself carries over
    already = [t for t in state.downweighted_at if t is not None]
    cap = len(state.members) if params.downweight_max is None else params.downweight_max
    if (
        params.downweighting
        and iteration >= params.downweight_start
        and iteration not in already
        and len(already) < cap
    ):
        candidates = [i for i, t in enumerate(state.downweighted_at) if t is None]
        if candidates:
            # lowest reputation first; ties go to the member listed first
            chosen = min(candidates, key=lambda i: (state.reputation[i], i))
            state.weight[chosen] = params.downweight_gamma * len(already)
            state.downweighted_at[chosen] = iteration
    return state


def _std(values: list[float], ddof: int) -> float:
    n = len(values)
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - ddof))


def update(
    state: PoolState, a: int, b: int, score_a: float, score_b: float, params: ReputationSettings
) -> tuple[float, float, float, float, float]:
    """Apply Eq. (1) to members a and b (indices) in place, from their pre-duel values.

    Returns (kappa, reputation_a, deviation_a, reputation_b, deviation_b) after the update.
    """
    state.duels_this_iteration += 1
    k = kappa(state.duels_this_iteration, params)
    if not params.updates:
        return k, state.reputation[a], state.deviation[a], state.reputation[b], state.deviation[b]
    ra, rb = state.reputation[a], state.reputation[b]
    sa, sb = state.deviation[a], state.deviation[b]
    for i, r, s, sign in ((a, ra, sa, 1.0), (b, rb, sb, -1.0)):
        other = state.reputation[a] if (i == b and params.sequential_update) else (rb if i == a else ra)
        z = (r - other) / math.sqrt(sa * sa + sb * sb)
        # |Phi(z) - Phi(-z)| = |erf(z / sqrt 2)|, the same for both unless sequential
        surprise = max(abs(math.erf(z / _SQRT2)), params.eps)
        g = sign * (score_a - score_b) * k * surprise / params.scale
        new = max(r + g * math.tanh(s), params.floor)
        window = state.deltas[i]
        window.append(new - r)
        if len(window) > params.window:
            del window[0]
        state.reputation[i] = new
        if len(window) >= params.min_deltas:
            state.deviation[i] = max(_std(window, params.ddof), params.sigma_min)
    return k, state.reputation[a], state.deviation[a], state.reputation[b], state.deviation[b]


def decide(score_a: float | None, score_b: float | None, min_gap: float = 0.0) -> str:
    if score_a is None or score_b is None:
        return "no_verdict"
    if score_a == score_b or abs(score_a - score_b) < min_gap:
        return "tie"
    return "a" if score_a > score_b else "b"


@dataclass(frozen=True)
class Duel:
    """One duel of a round: its id, its prompt and its two members."""

    duel_id: str
    prompt_id: str
    prompt: str
    member_a: str
    member_b: str


@dataclass(frozen=True)
class Verdict:
    """A duel's aggregated scores (None: no usable judge), the judges behind both and those
    dropped for scoring one side only."""

    score_a: float | None
    score_b: float | None
    n_judges: int = 0
    dropped: int = 0
    min_gap: float = 0.0  # reputation.min_gap: a closer duel is a tie

    @property
    def outcome(self) -> str:
        """a, b, tie or no_verdict."""
        return decide(self.score_a, self.score_b, self.min_gap)


def _standing(state: PoolState, a: int, b: int, when: str) -> dict:
    sides = (("a", a), ("b", b))
    return {f"{k}_{s}_{when}": getattr(state, k)[i] for s, i in sides for k in ("reputation", "deviation")}


def settle_duel(state: PoolState, duel: Duel, verdict: Verdict, params: ReputationSettings) -> dict:
    """The history row of a duel, after updating both reputations unless it has no verdict.
    With ``downweight_target: combatant`` the update sees each combatant's score times its
    down-weighting weight; the verdict never does."""
    a, b, s_a, s_b = duel.member_a, duel.member_b, verdict.score_a, verdict.score_b
    ia, ib = state.index[a], state.index[b]
    before = _standing(state, ia, ib, "before")
    k = gap = float("nan")
    if verdict.outcome != "no_verdict":
        u_a, u_b = s_a, s_b
        if params.downweight_target == "combatant":
            u_a, u_b = s_a * state.weight[ia], s_b * state.weight[ib]
        gap = u_a - u_b
        k = update(state, ia, ib, u_a, u_b, params)[0]
    return {
        "iteration": state.iteration,
        "round": state.round,
        "duel_id": duel.duel_id,
        "member_a": a,
        "member_b": b,
        "score_a": float("nan") if s_a is None else s_a,
        "score_b": float("nan") if s_b is None else s_b,
        "n_judges": verdict.n_judges,
        "dropped_judges": verdict.dropped,
        "gap": gap,
        **before,
        **_standing(state, ia, ib, "after"),
        "kappa": k,
        "outcome": verdict.outcome,
    }


def problems(r: ReputationSettings) -> list[str]:
    """Reputation settings under which no reputation can ever move, though updates are on."""
    if not r.updates:
        return []
    fix = "set reputation.updates: false for the ablation without updates"
    if max(r.kappa_start, r.kappa_min) == 0:
        return [f"reputation.kappa_start and kappa_min are 0: no reputation can ever change; {fix}"]
    if r.eps == 0:
        return [
            "reputation.eps is 0: every member starts at the same reputation, so the first update "
            f"(and every one after it) is 0 and no reputation ever changes; use eps > 0 or {fix}"
        ]
    largest = 9 * max(r.kappa_start, r.kappa_min) / r.scale  # a 1-10 score gap, surprise 1, tanh < 1
    if largest < 1e-9 * max(r.initial_reputation, r.floor):
        return [
            f"reputation.scale ({r.scale:g}) makes the largest update {largest:.3g}, too small to change "
            f"a reputation of {r.initial_reputation:g}: lower it (authors 20, paper 1) or {fix}"
        ]
    return []
