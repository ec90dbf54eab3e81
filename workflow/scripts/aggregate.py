"""rule aggregate: weighted aggregation, Eq. (1) and preference pairs for one round."""

from sparta import tables
from sparta.logs import setup
from sparta.reputation import PoolState, aggregate_round, begin_iteration
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
params = job_settings(sm).reputation
t = int(sm.wildcards.t)
state = PoolState.from_frame(tables.read(sm.input.state, "state"))
begin_iteration(state, t, params)
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
judgments = tables.read_many(sm.input.judgments, "judgments")
state.round = int(sm.wildcards.r)
history, prefs, counts = aggregate_round(state, duels, responses, judgments, params)
tables.write(history, sm.output.history, "history")
tables.write(prefs, sm.output.preferences, "preferences")
tables.write(state.to_frame(), sm.output.state, "state")
unusable = int(judgments["score"].isna().sum())
log.info(
    "iteration %d round %s: %s; %d of %d judgments unusable",
    t,
    sm.wildcards.r,
    counts,
    unusable,
    len(judgments),
)
if counts["duels"] and counts["tie"] > counts["duels"] / 2:
    log.warning("more than half of the duels tied: the judges hardly separate the answers")
for m, r, d, w in zip(state.members, state.reputation, state.deviation, state.weight):
    log.info("  %-16s reputation %8.3f  deviation %.3f  judge weight %.2f", m, r, d, w)
