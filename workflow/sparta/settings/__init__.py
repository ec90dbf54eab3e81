"""Every setting of a run: typed, documented, defaulted and bounded in one place.

Each setting is one dataclass field, declared with :func:`sparta.fields.setting`: its default,
help text, bounds, and its choices as a ``Literal`` type. :class:`Settings` (here) holds the
sections, each declared in the submodule of its domain (runtime, judging, training, data,
baselines) or beside its algorithm (:mod:`sparta.matchmaking`, :mod:`sparta.reputation`). The config schema
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
from dataclasses import dataclass
from typing import Any, Literal

from ..fields import MAX_TOKENS as MAX_TOKENS
from ..fields import setting, subset, unwrap
from ..matchmaking import MatchSettings
from ..members import MemberSpec
from ..reputation import ReputationSettings
from .baselines import BaselineSettings
from .data import AnalysisSettings, EvaluationSettings, PromptSettings
from .data import TaskSpec as TaskSpec
from .data import source_file as source_file
from .judging import Answer as Answer
from .judging import GenerationSettings, JudgeSettings
from .judging import Sampling as Sampling
from .judging import SamplingFields as SamplingFields
from .runtime import BackendSettings, BaseModel, ResourceSettings, VLLMSettings
from .runtime import JudgeModel as JudgeModel
from .runtime import StageResources as StageResources
from .training import DPOSettings, LoraSettings, SFTSettings, TrainSettings
from .training import LossType as LossType
from .training import Scheduler as Scheduler


class SettingsError(ValueError):
    """A config value that does not fit its setting; the message names the key."""


class ConfigError(ValueError):
    """A config the checks refuse (:mod:`sparta.config`): each problem names its key or file."""


Device = Literal["auto", "cpu", "cuda"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
NAME = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"
"""What an experiment's name may be (it names folders)."""

MemberConfig = MemberSpec
"""A member of the initial pool: the one member type, :class:`sparta.members.MemberSpec` (its
fields are declared there)."""


class Untracked:
    """A rule param Snakemake does not compare when it decides whether a job must rerun (it
    only compares builtin values): for settings that cannot change a result."""

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"Untracked({self.value!r})"


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
        "auto", help="Where models run; auto picks CUDA when present.", shared=("pool", "study")
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
    vllm: VLLMSettings = setting(factory=VLLMSettings, help=VLLMSettings.__doc__, shared=("pool", "study"))
    resources: ResourceSettings = setting(
        factory=ResourceSettings, help=ResourceSettings.__doc__, shared=("study",)
    )
    base_models: dict[str, BaseModel] = setting(factory=dict, help=BaseModel.__doc__)
    sft: SFTSettings = setting(factory=SFTSettings, help=SFTSettings.__doc__, shared=("pool",))
    lora: LoraSettings = setting(factory=LoraSettings, help=LoraSettings.__doc__, shared=("pool",))
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
    def member_names(self) -> list[str]:
        return [m.name for m in self.members]

    def base_folder(self, base: str) -> str:
        """The model folder of a member's ``base``: a converted GGUF, a named path, or a path."""
        spec = self.base_models.get(base)
        if spec is None:
            return base
        if spec.path is not None:
            return spec.path
        from ..layout import base_dir

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
        inner = unwrap(hint)
        return value if value is None or inner is hint else _convert(inner, value, where)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if origin is tuple:
        (inner, *_) = typing.get_args(hint)
        return tuple(_convert(inner, v, f"{where}[{i}]") for i, v in enumerate(value or ()))
    if origin is dict:
        _, inner = typing.get_args(hint)
        return {k: _convert(inner, v, f"{where}.{k}") for k, v in (value or {}).items()}
    if origin is Literal:  # a choice of whole numbers (reputation.ddof) is an int
        hint = int if {type(a) for a in typing.get_args(hint)} == {int} else hint
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
    derived = {"runtime": settings.runtime, "backend": BackendSettings(settings.backend, settings.vllm)}
    out = {}
    for name in names:
        if name not in SECTIONS:
            raise KeyError(f"unknown settings section {name!r}; known: {sorted(SECTIONS)}")
        out[name] = as_data(derived.get(name) or getattr(settings, name), params=True)
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
