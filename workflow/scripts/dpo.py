"""rule dpo: member t -> member t+1 on all preference pairs of iteration t."""

from pathlib import Path

from sparta import tables
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.settings import derive_seed, job_settings
from sparta.train import dpo_member

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
spec = MemberSpec.read(sm.input.member)
prefs = tables.read(sm.input.preferences, "preferences")
seed = derive_seed(job.runtime.seed, sm.wildcards.t, spec.name, "dpo")
summary = dpo_member(spec, prefs, Path(sm.output.member).parent, job.dpo, job.lora, job.runtime, seed)
log.info("DPO of %s on %d pairs: %s", spec.name, len(prefs), summary)
MemberSpec(spec.name, spec.base, summary["adapter"]).write(sm.output.member)
