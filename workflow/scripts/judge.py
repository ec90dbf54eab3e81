"""rule judge: the run's method judges (sparta.methods: Sparta's cross-judging, a baseline's
self-judging, meta-judging or annotator; SPIN none); in a pool job all requests run in the
same batches. One judgments table per served member."""

from pathlib import Path

from sparta import tables
from sparta.hub import local
from sparta.jobs import as_list, finish, served_members
from sparta.judging import defences
from sparta.logs import setup
from sparta.methods import JudgeRun, get
from sparta.methods.meta_rewarding import NOT_ASKED
from sparta.progress import Progress, adapter_stamp, file_stamp
from sparta.seeds import derive_seed
from sparta.settings import job_settings


def main(sm):
    log = setup(sm.log[0], sm.threads)
    job = job_settings(sm)
    cfg, t, r, method = job.judge, sm.wildcards.t, sm.wildcards.r, get(sm.params.method)
    duels = tables.read(sm.input.duels, "duels")
    responses = tables.read_many(sm.input.responses, "responses")
    reference = cfg.kind == "reference"  # the reference judge: no model runs
    specs, backend = served_members(sm, job, "judges", open_backend=not reference)

    def seed(*parts):
        return derive_seed(job.runtime.seed, t, r, *parts, "judge")

    for warning in method.judging_warnings(cfg, job.baselines):  # e.g. no judge pair can form
        log.warning(warning)
    # each finished block of judgments is kept in round_<r>/.progress: a retry after a time limit or
    # a requeue goes on from the next block (sparta/progress.py)
    outputs = as_list(sm.output.judgments)
    progress = Progress(
        Path(outputs[0]).parent.parent / ".progress" / ("judge-" + "+".join(s.name for s in specs)),
        [
            [(repr(s), adapter_stamp(local(s.adapter))) for s in specs],
            [file_stamp(f) for f in (sm.input.duels, *as_list(sm.input.responses))],
            [method.name, repr(cfg), repr(job.baselines), job.runtime],
        ],
    )
    run = JudgeRun(
        specs,
        duels,
        responses,
        cfg,
        job.runtime.system_prompt,
        job.baselines,
        backend=backend,
        seed=seed,
        progress=progress,
    )
    method.judge(run)
    table = run.table(method)
    progress.check()
    for spec, path in zip(specs, outputs):
        mine = table[table[method.judgment_owner] == spec.name] if len(table) else table
        tables.write(mine if len(mine) else tables.empty("judgments"), path, "judgments")
        meta = mine["kind"] == "meta"  # meta-rewarding: one row per re-judged answer, no judgment of one
        unusable = int(mine["score"][~meta].isna().sum())
        log.info(
            "%s (%s): %d judgments (%s, %s; defences %s): %d unusable, %d truncated, %d sanitized",
            spec.name,
            method.name,
            len(mine),
            "reference" if reference else cfg.format,
            "" if reference else cfg.mode,
            defences(cfg),
            unusable,
            int(mine["truncated"].sum()),
            int(mine["sanitized"].sum()),
        )
        if meta.any():
            log.info(
                "%s: %d re-judged answers, the meta-judge asked on %d (elsewhere no judge pair could form)",
                spec.name,
                int(meta.sum()),
                int((mine["error"][meta] != NOT_ASKED).sum()),
            )
        if unusable:
            log.warning(
                "%s: %d of %d judgments had no usable score; they are left out",
                spec.name,
                unusable,
                int((~meta).sum()),
            )
    progress.done()


# vLLM may start its engine in a spawned process, which imports this file again as a module:
# the job runs only in the process Snakemake started (vLLM's rule for a script that starts it)
if __name__ == "__main__":
    main(snakemake)  # noqa: F821
    finish()  # with a vLLM engine: the process ends here (sparta.jobs.finish)
