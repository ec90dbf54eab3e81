"""rule compare: the study's comparison table and the inference cost of each method.

Each run's best init comes from its own initial members (checkpoint 0 in its shared initial
pool). The member each run is scored with is the best on validation among every evaluated
checkpoint of every member, the initial pool included (``evaluation.select_from: all``), or
among its final members (``final``): a run's entry in params.runs may carry ``select_from``;
without it, each run's setting is read from the study's config.

The tables come from the rule's named inputs, per run (rules/common.smk, study_inputs):
``initial:<run>``, ``evaluations:<run>``, ``selection:<run>``, and per iteration t
``responses:<run>:<t>``, ``judgments:<run>:<t>``."""

import pandas as pd

from sparta import compare, tables
from sparta.jobs import as_list
from sparta.logs import setup
from sparta.study import expand

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
runs = pd.DataFrame(sm.params.runs)
if "select_from" not in runs:
    settings = expand(sm.config).experiments
    runs["select_from"] = [getattr(settings[run].evaluation, "select_from", "all") for run in runs["run"]]


def named(key):
    return as_list(sm.input[key])


evaluations, selections, responses, judgments, initial = {}, {}, {}, {}, {}
for r in sm.params.runs:
    run = r["run"]
    evaluations[run] = tables.read_many(named(f"evaluations:{run}"), "evaluation")
    selections[run] = tables.read(sm.input[f"selection:{run}"], "selection")
    # this run's own initial members, not its seed's first run's
    initial[run] = tables.read_many(named(f"initial:{run}"), "evaluation")
    answered = [
        tables.read_many(named(f"responses:{run}:{t}"), "responses").assign(iteration=t)
        for t in r["iterations"]
    ]
    judged = [
        tables.read_many(named(f"judgments:{run}:{t}"), "judgments").assign(iteration=t)
        for t in r["iterations"]
    ]
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
