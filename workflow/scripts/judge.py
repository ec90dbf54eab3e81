"""rule judge: each served judge scores both answers of every duel it is not in."""

import pandas as pd

from sparta import tables
from sparta.generate import SamplingParams, derive_seed
from sparta.jobs import as_list, served_members
from sparta.judge import JudgeItem, judge_by_expectation, judge_by_generation
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
cfg = sm.params.judge
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
text = dict(zip(zip(responses["duel_id"], responses["model"]), responses["response"]))
names, specs, engines = served_members(sm, "judges")
for judge, spec, path in zip(names, specs, as_list(sm.output.judgments)):
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
        served = engines(spec)
        if cfg["mode"] == "expected":
            out = judge_by_expectation(served, items, cfg["max_length"], sm.params.system, cfg["batch_size"])
        else:
            sampling = SamplingParams(cfg["temperature"], cfg["top_p"], cfg["top_k"], cfg["max_new_tokens"])
            seed = derive_seed(sm.params.seed, sm.wildcards.t, sm.wildcards.r, judge, "judge")
            out = judge_by_generation(served, items, sampling, seed, cfg["max_length"], sm.params.system,
                                      cfg["batch_size"])  # fmt: skip
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
    log.info("%s judged %d responses (mode %s): %d unusable, %d truncated", judge, len(rows), cfg["mode"],
             unusable, int(rows["truncated"].sum()) if len(rows) else 0)  # fmt: skip
    if unusable:
        log.warning("%s: %d of %d judgments had no usable score; they are left out of aggregation",
                    judge, unusable, len(rows))  # fmt: skip
