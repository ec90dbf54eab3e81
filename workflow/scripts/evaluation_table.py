"""rule evaluation_table: scores per member and checkpoint; best member per task."""

import pandas as pd

from sparta.analysis import select_best
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
rows = pd.concat([pd.read_parquet(p) for p in sm.input], ignore_index=True)
scores = rows.groupby(["task", "metric", "checkpoint", "member", "split"], as_index=False).agg(
    score=("score", "mean"), n=("score", "size")
)
scores.to_parquet(sm.output.scores, index=False)
selection = select_best(scores)
selection.to_parquet(sm.output.selection, index=False)
selection.to_csv(sm.output.table, sep="\t", index=False, float_format="%.4f")
log.info("selection (best on validation, reported on test):\n%s", selection.to_string(index=False))
log.info(
    "validation scores:\n%s",
    scores[scores["split"] == "validation"]
    .pivot_table(index=["task", "member"], columns="checkpoint", values="score")
    .round(3)
    .to_string(),
)
