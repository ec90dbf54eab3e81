"""Settings of training: LoRA, DPO, the initial pool's SFT and the trainers' trackers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..fields import MAX_TOKENS, setting

Scheduler = Literal[
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "warmup_stable_decay",
]
"""Learning-rate schedules (transformers names)."""


@dataclass(frozen=True)
class LoraSettings:
    """LoRA of adapters sparta creates (SFT, or the first DPO of a member without one)."""

    r: int = setting(8, ge=1, help="LoRA rank.")
    alpha: int = setting(16, ge=1, help="LoRA alpha (scaling = alpha / r).")
    dropout: float = setting(0.05, ge=0, lt=1, help="LoRA dropout.")
    target_modules: tuple[str, ...] = setting(
        ("q_proj", "k_proj", "v_proj", "o_proj"),
        help="Modules that get LoRA weights.",
        schema={"minItems": 1},
    )


LossType = Literal[
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
    "sigmoid_norm",
]
"""TRL's DPO losses."""

CHECKPOINTING = "Recompute activations in the backward pass: less GPU memory, slower, same result."


@dataclass(frozen=True)
class DPOSettings:
    """DPO of every member on all pairs of its iteration (authors' values)."""

    beta: float = setting(0.1, gt=0, le=10, help="DPO beta.", constant="DPO beta", source="authors' code")
    learning_rate: float = setting(
        1e-6, gt=0, le=1, help="Peak learning rate.", constant="DPO learning rate", source="paper / authors"
    )
    lr_scheduler: Scheduler = setting(
        "cosine",
        help="Learning-rate schedule.",
        constant="DPO learning-rate schedule",
        source="paper / authors",
    )
    warmup_ratio: float = setting(
        0.1,
        ge=0,
        lt=1,
        help="Share of steps of linear warmup.",
        constant="DPO warmup ratio",
        source="authors' code",
    )
    weight_decay: float = setting(
        1e-5, ge=0, le=1, help="AdamW weight decay.", constant="DPO weight decay", source="authors' code"
    )
    epochs: float = setting(
        1.0,
        gt=0,
        le=100,
        help="Passes over the iteration's pairs (at most 100).",
        constant="DPO epochs",
        source="paper",
    )
    batch_size: int = setting(1, ge=1, help="Pairs per device step.", constant="DPO batch", source="paper")
    gradient_accumulation: int = setting(1, ge=1, help="Steps accumulated per optimizer step.")
    max_length: int = setting(
        512,
        ge=16,
        le=MAX_TOKENS,
        help="Tokens of prompt + answer (the prompt is kept, the answer truncated).",
        constant="DPO max length",
        source="authors' code",
    )
    loss_type: LossType = setting("sigmoid", help="TRL DPO loss (sigmoid is the original DPO).")
    gradient_checkpointing: bool = setting(False, help=CHECKPOINTING)
    save_minutes: float = setting(
        10.0,
        ge=0,
        help="A DPO job saves its progress (adapter, optimizer, schedule, data position, random "
        "state) in its member's folder at the first step after every this many minutes (0: never); "
        "run again after a time limit, a requeue or a kill, it continues from the last save with the "
        "result of an uninterrupted job.",
        added="DPO progress saves",
    )


@dataclass(frozen=True)
class SFTSettings:
    """Short LoRA SFT that gives members with an ``sft_domain`` their initial expertise
    (paper appendix C.3)."""

    data_dir: str = setting("data/sft", help="Folder of <domain>.jsonl files (prompt, response).")
    examples: int = setting(256, ge=1, help="Examples per member.")
    max_steps: int = setting(
        30,
        ge=1,
        le=100000,
        help="Optimizer steps (at most 100,000: a short SFT that gives each member its domain).",
    )
    batch_size: int = setting(8, ge=1, help="Examples per optimizer step.")
    learning_rate: float = setting(
        2e-4, gt=0, le=1, help="Peak learning rate.", constant="SFT learning rate", source="paper C.3"
    )
    lr_scheduler: Scheduler = setting(
        "cosine", help="Learning-rate schedule.", constant="SFT learning-rate schedule", source="paper C.3"
    )
    warmup_ratio: float = setting(
        0.1,
        ge=0,
        lt=1,
        help="Share of steps of linear warmup.",
        constant="SFT warmup ratio",
        source="paper C.3",
    )
    max_length: int = setting(256, ge=16, le=MAX_TOKENS, help="Tokens per training example.")
    gradient_checkpointing: bool = setting(False, help=CHECKPOINTING)


Tracker = Literal[
    "tensorboard", "wandb", "trackio", "mlflow", "comet_ml", "neptune", "clearml", "dvclive", "swanlab"
]


@dataclass(frozen=True)
class TrainSettings:
    """Experiment trackers of the SFT and DPO trainers: off by default, nothing is contacted
    unless ``report_to`` names one. Changing them reruns nothing."""

    report_to: tuple[Tracker, ...] = setting(
        (),
        help="Trackers TRL reports to (none: nothing is contacted). tensorboard writes under "
        "results/<experiment>/logs/tensorboard/.",
    )
    project: str | None = setting(
        None,
        help="Tracker project (null: the experiment name); runs are named <experiment>/iter_<t>/<member>.",
    )
