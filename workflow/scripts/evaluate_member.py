"""rule evaluate_member: each served member at one checkpoint on every task."""

import pandas as pd

from sparta import tables
from sparta.evaluate import evaluate_task
from sparta.jobs import as_list, served_members
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.settings import job_settings
from sparta.tasks import load_task

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
cfg, system = job.evaluation, job.runtime.system_prompt
splits = {
    "validation": tables.read(sm.input.validation, "prompts"),
    "test": tables.read(sm.input.test, "prompts"),
}
tasks = [load_task(spec, splits, job.runtime.seed) for spec in cfg.tasks]
specs, backend = served_members(sm, job)
judge = None
if cfg.judge is not None:
    judge = backend.serve(MemberSpec("eval-judge", cfg.judge.base, cfg.judge.adapter))
for spec, path in zip(specs, as_list(sm.output.scores)):
    served = backend.serve(spec)
    frames = []
    for task in tasks:
        result = evaluate_task(served, task, system, cfg.batch_size, judge)
        frames.append(result)
        means = result.groupby("split")["score"].mean().round(4).to_dict()
        log.info("%s on %s: %s", spec.name, task.name, means)
    out = pd.concat(frames, ignore_index=True) if frames else tables.empty("evaluation")
    out["checkpoint"] = int(sm.wildcards.t)
    out["member"] = spec.name
    out["prediction"] = out["prediction"].astype(str)
    tables.write(out, path, "evaluation")
