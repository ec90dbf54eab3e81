"""What the model-stage scripts share: the members a job serves and the backend serving them."""

from __future__ import annotations

import logging
import os
import sys

from . import backends
from .backends import Backend
from .members import MemberSpec
from .settings import JobSettings


def as_list(value) -> list[str]:
    """A Snakemake named input/output: one path (fanout member) or several (fanout pool)."""
    return [value] if isinstance(value, str) else list(value)


def members(sm) -> list[MemberSpec]:
    """The members one job serves, in the rule's order: its ``members`` input, the member.json
    of each (the only place a job learns its members from)."""
    return [MemberSpec.read(p) for p in as_list(sm.input.members)]


def served_members(
    sm, job: JobSettings, names_param: str | None = None, open_backend: bool = True
) -> tuple[list[MemberSpec], Backend | None]:
    """The members one job serves (:func:`members`: its member.json inputs alone) and the
    backend serving them (None without ``open_backend``: a job that runs no model).
    ``names_param`` is not read: the rule's param of member names (rules/common.smk,
    served_names) only keeps the job's record as runs made before have it; the argument stays
    so the model scripts, unchanged, keep their mtime and nothing reruns."""
    specs = members(sm)
    return specs, (backends.open_backend(job.backend, job.runtime, specs) if open_backend else None)


def by_base(specs: list[MemberSpec]) -> list[list[int]]:
    """Positions of ``specs`` grouped by base model (in order of first appearance): one call of
    a backend serves members of one base, through that base's tokenizer."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.base, []).append(i)
    return list(groups.values())


def finish(status: int = 0) -> None:
    """The end of a job script that may have started a vLLM engine, its outputs written: the
    process ends here with ``status``, its logs flushed, without the interpreter's teardown, in
    which vLLM 0.32's engine processes and threads have aborted the process (SIGABRT,
    "terminate called without an active exception") after the job's work was done. A job that
    fails never gets here: its exception ends it as before."""
    vllm = sys.modules.get("sparta.backends.vllm")
    if vllm is None or not vllm.STARTED:
        return
    import psutil  # a dependency of vLLM

    children = psutil.Process().children(recursive=True)  # the engine's processes: ended first
    for child in children:
        child.terminate()
    for child in psutil.wait_procs(children, timeout=15)[1]:
        child.kill()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
