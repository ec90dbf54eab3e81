"""rule dpo: members t -> t+1 on all preference pairs of iteration t (one member, or the
whole pool one after another on one base load)."""

from pathlib import Path

from sparta import tables
from sparta.jobs import as_list
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.settings import derive_seed, job_settings
from sparta.train import dpo_members

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
specs = [MemberSpec.read(p) for p in as_list(sm.input.members)]
outs = [Path(p) for p in as_list(sm.output.member)]
prefs = tables.read(sm.input.preferences, "preferences")
seeds = [derive_seed(job.runtime.seed, sm.wildcards.t, spec.name, "dpo") for spec in specs]
summaries = dpo_members(
    [(spec, out.parent, seed) for spec, out, seed in zip(specs, outs, seeds)],
    prefs,
    job.dpo,
    job.lora,
    job.runtime,
)
for spec, out, summary in zip(specs, outs, summaries):
    history = summary.pop("log_history")
    log.info("DPO of %s on %d pairs: %s (%d log rows)", spec.name, len(prefs), summary, len(history))
    MemberSpec(spec.name, spec.base, summary["adapter"]).write(out)
