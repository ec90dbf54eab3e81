"""Loading pool members: a base model plus an optional LoRA adapter.

A member on disk is a folder with ``member.json``: ``{"name", "base", "adapter"}`` where
``base`` is a Hugging Face model folder and ``adapter`` a PEFT adapter folder (or null).
:class:`MemberLoader` loads each base once per process and attaches adapters by name, so a
job that serves several members of one base pays for one base load.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberSpec:
    name: str
    base: str
    adapter: str | None = None

    @classmethod
    def read(cls, path: str | os.PathLike) -> MemberSpec:
        path = Path(path)
        data = json.loads(path.read_text())
        adapter = data.get("adapter")
        # adapter paths are stored relative to the member.json so a results folder can move
        if adapter is not None and not os.path.isabs(adapter):
            adapter = str((path.parent / adapter).resolve())
        return cls(name=data["name"], base=data["base"], adapter=adapter)

    def write(self, path: str | os.PathLike) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        adapter = self.adapter
        if adapter is not None and Path(adapter).resolve().is_relative_to(path.parent.resolve()):
            adapter = os.path.relpath(Path(adapter).resolve(), path.parent.resolve())
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"name": self.name, "base": self.base, "adapter": adapter}, indent=2))
        os.replace(tmp, path)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def check_model_folder(path: str | os.PathLike, what: str = "model") -> Path:
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{what} folder {path} has no config.json: point it at a Hugging Face model folder"
        )
    return path


def load_tokenizer(base: str | os.PathLike):
    tok = AutoTokenizer.from_pretrained(check_model_folder(base, "base model"))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation and scoring pad on the left
    if tok.chat_template is None:
        raise ValueError(
            f"the tokenizer of {base} has no chat template; sparta prompts every model through it"
        )
    return tok


def load_base(base: str | os.PathLike, device: torch.device, dtype: torch.dtype):
    model = AutoModelForCausalLM.from_pretrained(check_model_folder(base, "base model"), dtype=dtype)
    return model.to(device).eval()


class MemberLoader:
    """Loads members, sharing one base model per base path in this process."""

    def __init__(self, device: str = "auto", dtype: str = "auto"):
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self._bases: dict[str, object] = {}
        self._tokenizers: dict[str, object] = {}
        self._adapters: dict[str, set[str]] = {}

    def tokenizer(self, spec: MemberSpec):
        if spec.base not in self._tokenizers:
            self._tokenizers[spec.base] = load_tokenizer(spec.base)
        return self._tokenizers[spec.base]

    def load(self, spec: MemberSpec):
        """The model of ``spec``, with its adapter active (or all adapters off)."""
        from peft import PeftModel

        model = self._bases.get(spec.base)
        if model is None:
            log.info("loading base %s", spec.base)
            model = load_base(spec.base, self.device, self.dtype)
            self._bases[spec.base] = model
        if spec.adapter is None:
            if isinstance(model, PeftModel):
                return _AdaptersOff(model)
            return model
        check_adapter_folder(spec.adapter)
        loaded = self._adapters.setdefault(spec.base, set())
        if not isinstance(model, PeftModel):
            model = PeftModel.from_pretrained(model, spec.adapter, adapter_name=spec.name)
            model.to(self.device).eval()
            self._bases[spec.base] = model
        elif spec.name not in loaded:
            model.load_adapter(spec.adapter, adapter_name=spec.name)
        loaded.add(spec.name)
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


def check_adapter_folder(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not (path / "adapter_config.json").is_file():
        raise FileNotFoundError(f"adapter folder {path} has no adapter_config.json (a PEFT adapter)")
    return path


def chat_text(tok, user: str, system: str | None = None, assistant_prefix: str = "") -> str:
    """The prompt text of one user turn through the model's chat template, ready for the
    assistant to speak (optionally with the first words of its answer already given)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text + assistant_prefix


def convert_gguf(package: str, filename: str, folder: str | os.PathLike) -> Path:
    """Load a GGUF shipped in ``package`` once (slow: de-quantizes every tensor) and save it as
    a plain safetensors folder, so later loads take seconds. Atomic: the folder appears whole."""
    import shutil

    from .config import gguf_path

    src = gguf_path(package, filename)
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    quantized = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = quantized.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the weights below are plain floats
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder
