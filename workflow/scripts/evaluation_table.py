"""rule evaluation_table: scores per member and checkpoint; best member per task."""

from sparta import tables
from sparta.analysis import score_table, select_best
from sparta.logs import setup
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
scores = score_table(tables.read_many(sm.input, "evaluation"))
tables.write(scores, sm.output.scores, "scores")
selection = select_best(scores, job_settings(sm).evaluation.select_from)
tables.write(selection, sm.output.selection, "selection")
selection.to_csv(sm.output.table, sep="\t", index=False, float_format="%.4f")
log.info("selection (best on validation, reported on test):\n%s", selection.to_string(index=False))
validation = scores[scores["split"] == "validation"]
pivot = validation.pivot_table(index=["task", "member"], columns="checkpoint", values="score")
log.info("validation scores:\n%s", pivot.round(3).to_string())
