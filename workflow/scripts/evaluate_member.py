"""rule evaluate_member: each served member at one checkpoint on every task."""

import pandas as pd

from sparta import tables
from sparta.evaluate import evaluate_task
from sparta.jobs import as_list, served_members
from sparta.logs import setup
from sparta.models import MemberSpec
from sparta.tasks import load_task

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
cfg = sm.params.evaluation
splits = {
    "validation": tables.read(sm.input.validation, "prompts"),
    "test": tables.read(sm.input.test, "prompts"),
}
tasks = [load_task(task_spec, splits, sm.params.seed) for task_spec in cfg["tasks"]]
names, specs, engines = served_members(sm)
judge = None
if cfg.get("judge"):
    judge = engines(MemberSpec("eval-judge", cfg["judge"]["base"], cfg["judge"].get("adapter")))
for spec, path in zip(specs, as_list(sm.output.scores)):
    served = engines(spec)
    frames = []
    for task in tasks:
        result = evaluate_task(served, task, sm.params.system, cfg["batch_size"], judge)
        frames.append(result)
        log.info(
            "%s on %s: %s", spec.name, task.name, result.groupby("split")["score"].mean().round(4).to_dict()
        )
    out = (
        pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["task", "metric", "split"])
    )
    out.insert(0, "checkpoint", int(sm.wildcards.t))
    out.insert(1, "member", spec.name)
    out["prediction"] = out["prediction"].astype(str)
    out.to_parquet(path, index=False)
