"""Model backends behind one small interface: what combat, judging and evaluation need.

A backend holds the base model(s) of one job and serves its members (a base plus an optional
LoRA adapter), one member per request, so requests of different members of one base share
batches: ``generate`` gives one :class:`Generation` per prompt (token ids through the chat
template, :func:`sparta.chat.chat_ids`), request i answered by ``members[i]`` with its own
``seeds[i]``; ``continuation_logprobs`` the summed log-probability of each continuation of
each prompt. :class:`Served` binds them to one member or one per request, with the tokenizer
``tok``; judging and evaluation are written once on top of it.

One module per backend (:mod:`sparta.backends.hf`, :mod:`sparta.backends.vllm`, imported only
when chosen); callers get one with :func:`open_backend` and never ask which. This module is pure.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..members import MemberSpec
from ..settings import BackendSettings, Runtime, Sampling

BACKENDS = {"hf": "sparta.backends.hf", "vllm": "sparta.backends.vllm"}


@dataclass(frozen=True)
class Generation:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" (end of turn) or "length" (max_new_tokens reached)


class Backend(ABC):
    """The models of one job: every backend implements the three primitives; serving members
    (:meth:`serve`, :meth:`serve_each`) is written once here on top of them."""

    @abstractmethod
    def tokenizer(self, spec: MemberSpec) -> Any: ...

    @abstractmethod
    def generate(
        self,
        members: list[MemberSpec],
        prompts: list[list[int]],
        sampling: Sampling,
        seeds: list[int],
        *,
        batch_size: int = 8,
        desc: str = "generate",
    ) -> list[Generation]: ...

    @abstractmethod
    def continuation_logprobs(
        self,
        members: list[MemberSpec],
        prompts: list[list[int]],
        conts: list[list[list[int]]],
        batch_size: int = 8,
    ) -> list[list[float]]: ...

    def serve(self, spec: MemberSpec) -> Served:
        """Every request answered by ``spec``."""
        return Served(self, spec)

    def serve_each(self, specs: Sequence[MemberSpec]) -> Served:
        """Request i answered by ``specs[i]``."""
        return Served(self, list(specs))


class Served:
    """A backend's primitives bound to one member (every request) or to one member per request
    (a list, as long as the requests): what judging and evaluation call."""

    def __init__(self, backend: Backend, members: MemberSpec | Sequence[MemberSpec]):
        self.backend = backend
        self.members = members if isinstance(members, MemberSpec) else list(members)
        first = self.members if isinstance(self.members, MemberSpec) else self.members[0]
        self.tok = backend.tokenizer(first)

    def _each(self, n: int) -> list[MemberSpec]:
        if isinstance(self.members, MemberSpec):
            return [self.members] * n
        if len(self.members) != n:
            raise ValueError(f"{n} requests for {len(self.members)} members: one member per request")
        return self.members

    def generate(
        self,
        prompts: list[list[int]],
        sampling: Sampling,
        seeds: Sequence[int],
        batch_size: int = 8,
        desc: str = "generate",
    ) -> list[Generation]:
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds: one seed per request")
        members = self._each(len(prompts))
        return self.backend.generate(
            members, list(prompts), sampling, list(seeds), batch_size=batch_size, desc=desc
        )

    def continuation_logprobs(self, prompts, conts, batch_size: int = 8) -> list[list[float]]:
        return self.backend.continuation_logprobs(self._each(len(prompts)), prompts, conts, batch_size)


def open_backend(backend: BackendSettings, runtime: Runtime, specs: Sequence[MemberSpec] = ()) -> Backend:
    """The backend named in the settings, for a job that serves ``specs`` (vLLM sizes its LoRA
    slots from them)."""
    if backend.name not in BACKENDS:
        raise ValueError(f"unknown backend {backend.name!r}: use one of {sorted(BACKENDS)}")
    return importlib.import_module(BACKENDS[backend.name]).open_backend(backend, runtime, list(specs))


def decode_answer(tok, ids: list[int], stops, finished: bool = False) -> Generation:
    """The answer in generated ``ids``: cut at the first stop token (end of turn), decoded.
    ``finished`` marks an answer the engine ended by itself without a stop token in ``ids``."""
    for pos, t in enumerate(ids):
        if t in stops:
            return Generation(tok.decode(ids[:pos], skip_special_tokens=True).strip(), pos, "stop")
    text = tok.decode(ids, skip_special_tokens=True).strip()
    return Generation(text, len(ids), "stop" if finished else "length")
