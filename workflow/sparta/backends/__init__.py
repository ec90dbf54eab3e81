"""Model backends behind one small interface: what combat, judging and evaluation need.

A backend holds the base model(s) of one job and serves its members (a base plus an optional
LoRA adapter). A served member has a tokenizer ``tok`` and two primitives; everything else
(judge prompts, the expected score, option log-likelihoods) is written once on top of them,
in :mod:`sparta.judging` and :mod:`sparta.evaluate`:

- ``generate(texts, sampling, seed, batch_size, desc)``: one :class:`Generation` per prompt
  text (already through the chat template), in input order;
- ``continuation_logprobs(prompts, conts, batch_size)``: for each prompt (token ids) the
  summed log-probability of each of its continuations (token ids).

One module per backend: :mod:`sparta.backends.hf` (transformers + PEFT in this process, CPU
or GPU) and :mod:`sparta.backends.vllm` (one vLLM engine per base, members as LoRA requests;
imported only when chosen). Callers get one with :func:`open_backend` and never ask which.
This module itself is pure.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..members import MemberSpec
from ..settings import BackendSettings, Runtime, Sampling

BACKENDS = {"hf": "sparta.backends.hf", "vllm": "sparta.backends.vllm"}


@dataclass(frozen=True)
class Generation:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" (end of turn) or "length" (max_new_tokens reached)


class ServedMember(Protocol):
    """One member, ready to answer and to score."""

    tok: Any

    def generate(
        self, texts: list[str], sampling: Sampling, seed: int, batch_size: int = 8, desc: str = "generate"
    ) -> list[Generation]: ...

    def continuation_logprobs(
        self, prompts: list[list[int]], conts: list[list[list[int]]], batch_size: int = 8
    ) -> list[list[float]]: ...


class Backend(Protocol):
    """The models of one job: ``serve(spec)`` gives a member (loaded on first use)."""

    def serve(self, spec: MemberSpec) -> ServedMember: ...


def open_backend(backend: BackendSettings, runtime: Runtime, specs: Sequence[MemberSpec] = ()) -> Backend:
    """The backend named in the settings, for a job that serves ``specs`` (vLLM sizes its LoRA
    slots from them)."""
    if backend.name not in BACKENDS:
        raise ValueError(f"unknown backend {backend.name!r}: use one of {sorted(BACKENDS)}")
    module = importlib.import_module(BACKENDS[backend.name])
    return module.open_backend(backend, runtime, list(specs))


def decode_answer(tok, ids: list[int], stops, finished: bool = False) -> Generation:
    """The answer in generated ``ids``: cut at the first stop token (end of turn), decoded.
    ``finished`` marks an answer the engine ended by itself without a stop token in ``ids``."""
    for pos, t in enumerate(ids):
        if t in stops:
            return Generation(tok.decode(ids[:pos], skip_special_tokens=True).strip(), pos, "stop")
    text = tok.decode(ids, skip_special_tokens=True).strip()
    return Generation(text, len(ids), "stop" if finished else "length")
