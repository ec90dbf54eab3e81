"""What the model-stage scripts share: the members a job serves and the engines serving them."""

from __future__ import annotations

from .engines import Engines
from .models import MemberSpec


def as_list(value) -> list[str]:
    """A Snakemake named input/output: one path (fanout member) or several (fanout pool)."""
    return [value] if isinstance(value, str) else list(value)


def served_members(sm, names_param: str = "members") -> tuple[list[str], list[MemberSpec], Engines]:
    """Names, specs and engines of the members one job serves, in the rule's order."""
    names = list(getattr(sm.params, names_param))
    specs = [MemberSpec.read(p) for p in as_list(sm.input.members)]
    for name, spec in zip(names, specs):
        if spec.name != name:
            raise ValueError(f"member.json of {name} names {spec.name}: rerun the job that wrote it")
    engines = Engines(
        sm.params.backend, sm.params.device, sm.params.dtype, specs, sm.params.vllm, sm.params.seed
    )
    return names, specs, engines
