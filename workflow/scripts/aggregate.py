"""rule aggregate: Sparta's weighted aggregation, Eq. (1) and preference pairs for one round;
or a baseline's pairs (each member's own), with the reputations left as they are."""

from sparta import tables
from sparta.logs import setup
from sparta.methods import baseline_pairs
from sparta.reputation import PoolState, aggregate_round, begin_iteration, frame
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
job = job_settings(sm)
params, method = job.reputation, sm.params.method
t = int(sm.wildcards.t)
state = PoolState.from_frame(tables.read(sm.input.state, "state"))
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
judgments = tables.read_many(sm.input.judgments, "judgments")
if method == "sparta":
    begin_iteration(state, t, params)
    state.round = int(sm.wildcards.r)
    history, prefs, counts = aggregate_round(state, duels, responses, judgments, params)
else:  # a baseline: no duels between members, no reputations; every member its own pairs
    state.iteration, state.round = t, int(sm.wildcards.r)
    history = frame([], "history")
    b = job.baselines
    prefs = baseline_pairs(method, duels, responses, judgments, b.length_control, b.min_margin)
    counts = {"prompts": len(duels), "pairs": len(prefs), **prefs.groupby("trainee").size().to_dict()}
tables.write(history, sm.output.history, "history")
tables.write(prefs, sm.output.preferences, "preferences")
tables.write(state.to_frame(), sm.output.state, "state")
unusable = int(judgments["score"].isna().sum())
log.info(
    "iteration %d round %s (%s): %s; %d of %d judgments unusable",
    t,
    sm.wildcards.r,
    method,
    counts,
    unusable,
    len(judgments),
)
if method == "sparta" and counts["duels"] and counts["tie"] > counts["duels"] / 2:
    log.warning("more than half of the duels tied: the judges hardly separate the answers")
for m, r, d, w in zip(state.members, state.reputation, state.deviation, state.weight):
    log.info("  %-16s reputation %8.3f  deviation %.3f  judge weight %.2f", m, r, d, w)
