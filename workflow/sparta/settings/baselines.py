"""Settings of the self-alignment baselines (method self_rewarding, meta_rewarding, spin,
sppo): :mod:`sparta.methods` reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..fields import setting
from .runtime import JudgeModel


@dataclass(frozen=True)
class BaselineSettings:
    """The self-alignment baselines (method self_rewarding, meta_rewarding, spin, sppo)."""

    samples: int | None = setting(
        None,
        ge=2,
        help="Answers a member samples per prompt, with the combat sampling (null: the method's own "
        "default, 5 for sppo as its official runs, 4 for self_rewarding and meta_rewarding; SPIN "
        "answers once).",
    )
    meta_judgments: int = setting(
        3,
        ge=3,
        help="meta_rewarding: judgments (with reasons) of the answer whose judgments vary most that the "
        "meta-judge compares, every two in both orders (the actor's own when judge_samples is at least "
        "this in generate mode, else sampled anew).",
    )
    length_control: Any = setting(
        None,
        ge=0,
        le=1,
        help="self_rewarding, meta_rewarding: the paper's length control rho of the actor pairs: chosen = "
        "the shortest answer scored within rho x (best - worst) of the best; rejected = the longest as "
        "near the worst. A number: rho of every iteration; a list: rho of iteration 1, 2, ... in turn, "
        "its last value for every iteration after it (null: the method's default, [0, 0, 0.1] for "
        "meta_rewarding as NeMo-Aligner's recipe, off for self_rewarding; 0: only ties broken by length).",
        schema={
            "type": ["number", "array", "null"],
            "items": {"type": "number", "minimum": 0, "maximum": 1},
            "minItems": 1,
        },
    )
    judge_pair_share: float = setting(
        0.15,
        ge=0,
        le=1,
        help="meta_rewarding: at most this share of a member's pairs of an iteration are judge pairs; "
        "those formed first in the iteration's prompt order are kept (NeMo-Aligner's meta_judge_pcnt: "
        "above 0.15 its judge came to give every answer the same score). 1: no cap.",
        added="meta-rewarding judge-pair caps",
    )
    judge_score_share: float = setting(
        0.4,
        gt=0,
        le=1,
        help="meta_rewarding: a judge pair is kept only while the kept judge pairs whose chosen "
        "judgment gives the same score are under this share, counting one extra per score of the "
        "judge's scale, in the iteration's prompt order (NeMo-Aligner's meta_max_relative_pcnt). 1: no cap.",
        added="meta-rewarding judge-pair caps",
    )
    judge_pair_cap: Literal["share", "per_score"] = setting(
        "share",
        help="meta_rewarding: what bounds the judge pairs beside the score cap. share: judge_pair_share "
        "of the member's pairs; per_score: NeMo-Aligner's code, each chosen score at most 20% of the "
        "member's prompts of the iteration over the scale's steps, and a judge pair for every prompt "
        "without an actor pair or up to judge_pair_share of the prompts, whichever is more.",
        added="meta-rewarding per-score judge-pair limit",
    )
    annotator: JudgeModel | None = setting(
        None,
        help="sppo's win-probability model {base, adapter} (null: the members' base model without "
        "adapter), used pairwise in expected mode.",
    )
    sppo_loss: Literal["sppo", "sppo_hard"] = setting(
        "sppo",
        help="sppo: SPPO's squared loss on the estimated win probabilities; sppo_hard: TRL's, with "
        "P = 1 and 0.",
    )
    sppo_eta: float = setting(
        1000.0,
        gt=0,
        le=1_000_000,
        help="sppo: eta of SPPO's loss, (log pi/pi_ref(y) - eta (P(y) - 1/2))^2; the official runs "
        "pass beta = 1e-3, i.e. eta = 1/beta = 1000. Separate from dpo.beta.",
    )
    spin_history: int = setting(
        2,
        ge=1,
        help="spin: a member trains on the pairs of this many iterations, the current one and those "
        "before it (2: from iteration 2 on the current and the previous one, as SPIN's recipe; 1: "
        "only the current iteration's).",
    )
    min_margin: float = setting(
        0.5,
        ge=0,
        le=9,
        help="self_rewarding, meta_rewarding: an actor pair needs chosen score - rejected score of at "
        "least this (on the judge's 1-10 scale, so at most 9), so near-equal expected scores make no "
        "pair; ties never do.",
    )
    judge_prompt: Literal["additive", "sparta"] = setting(
        "additive",
        help="self_rewarding, meta_rewarding: the judge prompt; additive: the paper's "
        "LLM-as-a-judge prompt, five criteria a point each, a short justification, 'Score: N' "
        "(0-5 points stored as 1 + 9 points / 5); sparta: the 1-10 JSON prompt of the Sparta judges.",
    )
    judge_samples: int = setting(
        3,
        ge=1,
        help="self_rewarding, meta_rewarding in generate mode: the member judges each answer this "
        "many times (paper: 3) and its score is the mean of the usable ones; expected mode reads "
        "one expected score, the reference judge one check.",
    )

    def __post_init__(self):
        # length_control: a number or a schedule by iteration (a list in the config), kept as a tuple
        rho = self.length_control

        def unit(x) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1

        schedule = isinstance(rho, (list, tuple))
        if rho is not None and not (all(map(unit, rho)) and len(rho) if schedule else unit(rho)):
            raise ValueError(f"length_control must be a number in [0, 1] or a list of them, got {rho!r}")
        if schedule:
            object.__setattr__(self, "length_control", tuple(float(x) for x in rho))
