"""rule compare_figure: the study's comparison and inference cost as one figure (PNG)."""

from sparta import figures, tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
table = tables.read(sm.input.comparison, "comparison")
cost = tables.read(sm.input.cost, "cost")
figures.save(figures.comparison(table, cost), sm.output[0])
log.info("wrote %s", sm.output[0])
