"""rule gather_preferences: concatenate the rounds' preference tables."""

from sparta import tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
prefs = tables.read_many(sm.input.rounds, "preferences")
tables.write(prefs, sm.output.preferences, "preferences")
log.info("%d preference pairs", len(prefs))
if len(prefs) == 0:
    log.warning("no preference pairs this iteration: every member stays unchanged")
