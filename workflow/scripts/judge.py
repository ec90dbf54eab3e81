"""rule judge: each served judge scores both answers of every duel it is not in; in a pool job
all judges' requests run in the same batches."""

import pandas as pd

from sparta import tables
from sparta.jobs import as_list, by_base, served_members
from sparta.judging import JudgeItem, defences, judge_duels
from sparta.logs import setup
from sparta.settings import derive_seed, job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
cfg, system, t, r = job.judge, job.runtime.system_prompt, sm.wildcards.t, sm.wildcards.r
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
text = dict(zip(zip(responses["duel_id"], responses["model"]), responses["response"]))
specs, backend = served_members(sm, job, "judges")
asked = []  # (judge, duel id, target, item): both answers of a duel in turn, judges in order
for spec in specs:
    for d in duels[(duels["model_a"] != spec.name) & (duels["model_b"] != spec.name)].itertuples(index=False):
        for target in (d.model_a, d.model_b):
            if (d.duel_id, target) not in text:
                raise ValueError(f"no response of {target} in duel {d.duel_id}: rerun its combat job")
            asked.append((spec, d.duel_id, target, JudgeItem(d.prompt, text[(d.duel_id, target)])))
out = [None] * len(asked)
for group in by_base([spec for spec, *_ in asked]):  # pairs of one duel stay together
    served = backend.serve_each([asked[i][0] for i in group])
    seeds = [derive_seed(job.runtime.seed, t, r, asked[i][0].name, *asked[i][1:3], "judge") for i in group]
    judged = judge_duels(served, [asked[i][3] for i in group], cfg, system, seeds)
    for i, j in zip(group, judged):
        out[i] = j
rows = pd.DataFrame(
    {
        "duel_id": [d for _, d, _, _ in asked],
        "judge": [spec.name for spec, *_ in asked],
        "target": [target for _, _, target, _ in asked],
        "score": pd.array([j.score for j in out], dtype="Float64"),
        "raw": [j.raw for j in out],
        "error": [j.error for j in out],
        "truncated": pd.array([j.truncated for j in out], dtype="boolean"),
        "format": cfg.format,
        "defences": defences(cfg),
        "sanitized": pd.array([j.sanitized for j in out], dtype="boolean"),
    }
)
for spec, path in zip(specs, as_list(sm.output.judgments)):
    mine = rows[rows["judge"] == spec.name] if len(rows) else tables.empty("judgments")
    tables.write(mine, path, "judgments")
    unusable = int(mine["score"].isna().sum())
    cut, cleaned = int(mine["truncated"].sum()), int(mine["sanitized"].sum())
    log.info(
        "%s judged %d answers (%s, %s; defences %s): %d unusable, %d truncated, %d sanitized",
        spec.name,
        len(mine),
        cfg.format,
        cfg.mode,
        defences(cfg),
        unusable,
        cut,
        cleaned,
    )
    if unusable:
        log.warning(
            "%s: %d of %d judgments had no usable score; they are left out of aggregation",
            spec.name,
            unusable,
            len(mine),
        )
