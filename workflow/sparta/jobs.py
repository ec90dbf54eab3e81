"""What the model-stage scripts share: the members a job serves and the backend serving them."""

from __future__ import annotations

from . import backends
from .backends import Backend
from .members import MemberSpec
from .settings import JobSettings


def as_list(value) -> list[str]:
    """A Snakemake named input/output: one path (fanout member) or several (fanout pool)."""
    return [value] if isinstance(value, str) else list(value)


def served_members(
    sm, job: JobSettings, names_param: str = "members", open_backend: bool = True
) -> tuple[list[MemberSpec], Backend | None]:
    """Specs of the members one job serves, in the rule's order, and the backend serving them
    (None without ``open_backend``: a job that runs no model)."""
    names = list(getattr(sm.params, names_param))
    specs = [MemberSpec.read(p) for p in as_list(sm.input.members)]
    for name, spec in zip(names, specs):
        if spec.name != name:
            raise ValueError(f"member.json of {name} names {spec.name}: rerun the job that wrote it")
    return specs, (backends.open_backend(job.backend, job.runtime, specs) if open_backend else None)


def by_base(specs: list[MemberSpec]) -> list[list[int]]:
    """Positions of ``specs`` grouped by base model (in order of first appearance): one call of
    a backend serves members of one base, through that base's tokenizer."""
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault(spec.base, []).append(i)
    return list(groups.values())
