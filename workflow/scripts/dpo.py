"""rule dpo: members t -> t+1 on all preference pairs of iteration t (one member, or the
whole pool one after another on one base load)."""

from pathlib import Path

from sparta import tables
from sparta.jobs import as_list
from sparta.logs import setup
from sparta.members import RESULTS, MemberSpec
from sparta.methods import get
from sparta.seeds import derive_seed
from sparta.settings import job_settings
from sparta.train import Tracking, dpo_members, training_log

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
t = int(sm.wildcards.t)
specs = [MemberSpec.read(p) for p in as_list(sm.input.members)]
outs = [Path(p) for p in as_list(sm.output.member)]
# the pairs of the iterations the method trains on (SPIN: the last spin_history ones)
prefs = tables.read_many(as_list(sm.input.preferences), "preferences")
seeds = [derive_seed(job.runtime.seed, t, spec.name, "dpo") for spec in specs]
summaries = dpo_members(
    [(spec, out.parent, seed) for spec, out, seed in zip(specs, outs, seeds)],
    prefs,
    job.dpo,
    job.lora,
    job.runtime,
    Tracking(**sm.params.tracking.value),
    loss=get(sm.params.method).loss(job.baselines),
    sppo_eta=job.baselines.sppo_eta,
)
for spec, out, metrics, summary in zip(specs, outs, as_list(sm.output.training_log), summaries):
    history = summary.pop("log_history")
    tables.write(training_log(history, spec.name, t, "dpo", summary["pairs"]), metrics, "training_log")
    log.info(
        "DPO of %s on %d of the %d pairs it may train on: %s",
        spec.name,
        summary["pairs"],
        len(prefs),
        summary,
    )
    MemberSpec(spec.name, spec.base, summary["adapter"]).write(out, root=RESULTS)
