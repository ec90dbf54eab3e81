"""rule evaluate_member: each served member at one checkpoint on every task; in a pool job all
members' requests run in the same batches."""

from pathlib import Path

import pandas as pd

from sparta import tables
from sparta.evaluate import evaluate_checkpoint
from sparta.hub import local
from sparta.jobs import as_list, by_base, finish, served_members
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.progress import Progress, adapter_stamp, file_stamp, run_parts
from sparta.settings import job_settings
from sparta.tasks import load_task


def main(sm):
    log = setup(sm.log[0], sm.threads)
    job = job_settings(sm)
    cfg, system = job.evaluation, job.runtime.system_prompt
    splits = {
        "validation": tables.read(sm.input.validation, "prompts"),
        "test": tables.read(sm.input.test, "prompts"),
    }
    tasks = [load_task(spec, splits, job.runtime.seed) for spec in cfg.tasks]
    specs, backend = served_members(sm, job)
    by_name = {s.name: s for s in specs}
    judge = None
    if cfg.judge is not None:
        judge = backend.serve(MemberSpec("eval-judge", cfg.judge.base, cfg.judge.adapter))

    def serve(names):
        return backend.serve_each([by_name[n] for n in names])

    groups = [[specs[i].name for i in group] for group in by_base(specs)]  # one base: the same batches

    def run_task(i):
        result = evaluate_checkpoint(
            serve, groups, tasks[i], system, cfg.batch_size, judge=judge, test=cfg.test
        )
        means = result.groupby(["member", "split"])["score"].mean().round(4).to_dict()
        log.info("%s: %s", tasks[i].name, means)
        return result

    # each finished task is kept in evaluation/.progress: a retry after a time limit or a requeue
    # goes on from the next task (sparta/progress.py)
    outputs = as_list(sm.output.scores)
    checkpoint = Path(outputs[0]).parent  # evaluation/checkpoint_<c>: its progress beside it
    names = "+".join(s.name for s in specs)
    progress = Progress(
        checkpoint.parent / ".progress" / f"{checkpoint.name}-{names}",
        [
            [(repr(s), adapter_stamp(local(s.adapter))) for s in specs],
            repr(cfg),
            job.runtime,
            [file_stamp(sm.input.validation), file_stamp(sm.input.test)],
        ],
    )
    frames = run_parts([t.name for t in tasks], run_task, progress, say=log.info)
    rows = pd.concat(frames, ignore_index=True) if frames else tables.empty("evaluation")
    progress.check()
    for spec, path in zip(specs, outputs):
        out = rows[rows["member"] == spec.name].copy()
        out["checkpoint"] = int(sm.wildcards.c)
        out["prediction"] = out["prediction"].astype(str)
        tables.write(out, path, "evaluation")
    progress.done()


# vLLM may start its engine in a spawned process, which imports this file again as a module:
# the job runs only in the process Snakemake started (vLLM's rule for a script that starts it)
if __name__ == "__main__":
    main(snakemake)  # noqa: F821
    finish()  # with a vLLM engine: the process ends here (sparta.jobs.finish)
