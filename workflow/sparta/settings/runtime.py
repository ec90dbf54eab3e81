"""Settings of where models run: the backend (:class:`VLLMSettings`), base models, judge
models, and each model stage's cluster resources."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..fields import MAX_TOKENS, setting


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


@dataclass(frozen=True)
class JudgeModel:
    """A judge model: a model folder and, optionally, a PEFT adapter."""

    base: str = setting(help="Model folder of the judge, or a hub id hf://<org>/<name>[@<revision>].")
    adapter: str | None = setting(
        None, help="Optional PEFT adapter of the judge (a folder or an hf:// hub id)."
    )


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
