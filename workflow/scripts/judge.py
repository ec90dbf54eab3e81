"""rule judge: each served judge scores both answers of every duel it is not in."""

import pandas as pd

from sparta import tables
from sparta.jobs import as_list, served_members
from sparta.judging import JudgeItem, judge_by_expectation, judge_by_generation
from sparta.logs import setup
from sparta.settings import derive_seed, job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
cfg, system = job.judge, job.runtime.system_prompt
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
text = dict(zip(zip(responses["duel_id"], responses["model"]), responses["response"]))
specs, backend = served_members(sm, job, "judges")
for spec, path in zip(specs, as_list(sm.output.judgments)):
    judge = spec.name
    todo = duels[(duels["model_a"] != judge) & (duels["model_b"] != judge)]
    keys, items = [], []
    for d in todo.itertuples(index=False):
        for target in (d.model_a, d.model_b):
            if (d.duel_id, target) not in text:
                raise ValueError(f"no response of {target} in duel {d.duel_id}: rerun its combat job")
            keys.append((d.duel_id, target))
            items.append(JudgeItem(d.prompt, text[(d.duel_id, target)]))
    out = []
    if items:
        served = backend.serve(spec)
        if cfg.mode == "expected":
            out = judge_by_expectation(served, items, cfg.max_length, system, cfg.batch_size)
        else:
            seed = derive_seed(job.runtime.seed, sm.wildcards.t, sm.wildcards.r, judge, "judge")
            out = judge_by_generation(
                served, items, cfg.sampling, seed, cfg.max_length, system, cfg.batch_size
            )
    rows = (
        pd.DataFrame(
            {
                "duel_id": [k[0] for k in keys],
                "judge": judge,
                "target": [k[1] for k in keys],
                "score": pd.array([j.score for j in out], dtype="Float64"),
                "raw": [j.raw for j in out],
                "error": [j.error for j in out],
                "truncated": [j.truncated for j in out],
            }
        )
        if keys
        else tables.empty("judgments")
    )
    tables.write(rows, path, "judgments")
    unusable = int(rows["score"].isna().sum()) if len(rows) else 0
    cut = int(rows["truncated"].sum()) if len(rows) else 0
    log.info(
        "%s judged %d responses (mode %s): %d unusable, %d truncated",
        judge,
        len(rows),
        cfg.mode,
        unusable,
        cut,
    )
    if unusable:
        log.warning(
            "%s: %d of %d judgments had no usable score; they are left out of aggregation",
            judge,
            unusable,
            len(rows),
        )
