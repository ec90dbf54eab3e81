"""rule evaluate_member: one member at one checkpoint on every task."""

import pandas as pd

from sparta import tables
from sparta.evaluate import evaluate_task
from sparta.logs import setup
from sparta.models import MemberLoader, MemberSpec
from sparta.tasks import load_task

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
cfg = sm.params.evaluation
splits = {
    "validation": tables.read(sm.input.validation, "prompts"),
    "test": tables.read(sm.input.test, "prompts"),
}
loader = MemberLoader(sm.params.device, sm.params.dtype)
spec = MemberSpec.read(sm.input.member)
model, tok = loader.load(spec), loader.tokenizer(spec)
judge = None
if cfg.get("judge"):
    jspec = MemberSpec("eval-judge", cfg["judge"]["base"], cfg["judge"].get("adapter"))
    judge = (MemberLoader(sm.params.device, sm.params.dtype).load(jspec), loader.tokenizer(jspec))
frames = []
for task_spec in cfg["tasks"]:
    task = load_task(task_spec, splits, sm.params.seed)
    result = evaluate_task(model, tok, task, sm.params.system, cfg["batch_size"], judge)
    frames.append(result)
    log.info("%s on %s: %s", spec.name, task.name, result.groupby("split")["score"].mean().round(4).to_dict())
out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["task", "metric", "split"])
out.insert(0, "checkpoint", int(sm.wildcards.t))
out.insert(1, "member", spec.name)
out["prediction"] = out["prediction"].astype(str)
out.to_parquet(sm.output.scores, index=False)
