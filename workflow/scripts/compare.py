"""rule compare: the study's comparison table and the inference cost of each method."""

import pandas as pd

from sparta import compare, tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
runs = pd.DataFrame(sm.params.runs)
evaluations, selections, responses, judgments, initial = {}, {}, {}, {}, {}
for r in sm.params.runs:
    run, members = r["run"], r["members"]
    evaluations[run] = tables.read_many(
        [f"results/{run}/evaluation/checkpoint_{c}/{m}.parquet" for c in r["checkpoints"] for m in members],
        "evaluation",
    )
    selections[run] = tables.read(f"results/{run}/evaluation/selection.parquet", "selection")
    if r["seed"] not in initial:
        initial[r["seed"]] = tables.read_many(
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
log.info("comparison (* significant at 0.05):\n%s", compare.format_table(table))
log.info("inference per iteration (mean over seeds):\n%s", spent.to_string(index=False))
