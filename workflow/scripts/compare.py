"""rule compare: the study's comparison table and the inference cost of each method.

Each run's best init comes from its own initial members (checkpoint 0 in its shared initial
pool). The member each run is scored with is the best on validation among every evaluated
checkpoint of every member, the initial pool included (``evaluation.select_from: all``), or
among its final members (``final``): a run's entry in params.runs may carry ``select_from``;
without it, each run's setting is read from the study's config."""

import pandas as pd

from sparta import compare, tables
from sparta.logs import setup
from sparta.study import expand

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
runs = pd.DataFrame(sm.params.runs)
if "select_from" not in runs:
    settings = expand(sm.config).experiments
    runs["select_from"] = [getattr(settings[run].evaluation, "select_from", "all") for run in runs["run"]]
evaluations, selections, responses, judgments, initial = {}, {}, {}, {}, {}
for r in sm.params.runs:
    run, members = r["run"], r["members"]
    evaluations[run] = tables.read_many(
        [f"results/{run}/evaluation/checkpoint_{c}/{m}.parquet" for c in r["checkpoints"] for m in members],
        "evaluation",
    )
    selections[run] = tables.read(f"results/{run}/evaluation/selection.parquet", "selection")
    initial[run] = tables.read_many(  # this run's own initial members, not its seed's first run's
        [f"results/{r['init']}/evaluation/checkpoint_0/{m}.parquet" for m in members], "evaluation"
    )
    answered, judged = [], []
    for t in r["iterations"]:
        for k in r["rounds"]:
            folder = f"results/{run}/iter_{t}/round_{k}"
            answered.append(
                tables.read_many([f"{folder}/responses/{m}.parquet" for m in members], "responses").assign(
                    iteration=t
                )
            )
            judged.append(
                tables.read_many([f"{folder}/judgments/{m}.parquet" for m in members], "judgments").assign(
                    iteration=t
                )
            )
    responses[run], judgments[run] = (
        pd.concat(answered, ignore_index=True),
        pd.concat(judged, ignore_index=True),
    )
table = compare.comparison(runs, evaluations, selections, initial)
tables.write(table, sm.output.comparison, "comparison")
table.to_csv(sm.output.table, sep="\t", index=False, float_format="%.4f")
spent = compare.cost(runs, responses, judgments)
tables.write(spent, sm.output.cost, "cost")
log.info("comparison (* Holm-adjusted p < 0.05):\n%s", compare.format_table(table))
log.info("inference per iteration (mean over seeds):\n%s", spent.to_string(index=False))
