"""rule dpo: member t -> member t+1 on all preference pairs of iteration t."""

from pathlib import Path

from sparta import tables
from sparta.generate import derive_seed
from sparta.logs import setup
from sparta.models import MemberSpec
from sparta.train import DPOParams, LoraParams, dpo_member

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
spec = MemberSpec.read(sm.input.member)
prefs = tables.read(sm.input.preferences, "preferences")
out = Path(sm.output.member).parent
summary = dpo_member(spec, prefs, out, DPOParams(**sm.params.dpo), LoraParams(**sm.params.lora),
                     derive_seed(sm.params.seed, sm.wildcards.t, spec.name, "dpo"), sm.params.system,
                     sm.params.device, sm.params.dtype)  # fmt: skip
log.info("DPO of %s on %d pairs: %s", spec.name, len(prefs), summary)
MemberSpec(spec.name, spec.base, summary["adapter"]).write(sm.output.member)
