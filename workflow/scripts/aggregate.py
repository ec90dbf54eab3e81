"""rule aggregate: Sparta's weighted aggregation, Eq. (1) and preference pairs for one round;
or a baseline's pairs (each member's own), with the reputations left as they are. The
iteration's last round also writes the iteration's preference set: every round's pairs."""

from sparta import tables
from sparta.logs import setup
from sparta.methods import Round, get
from sparta.reputation import PoolState
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
job = job_settings(sm)
params, method = job.reputation, get(sm.params.method)
t = int(sm.wildcards.t)
state = PoolState.from_frame(tables.read(sm.input.state, "state"))
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
judgments = tables.read_many(sm.input.judgments, "judgments")
# Sparta: Eq. (1) duel by duel; a baseline: no reputations, every member its own pairs
played = Round(t, int(sm.params.round), duels, responses, judgments)
history, prefs, counts = method.aggregate(state, played, params, job.baselines)
tables.write(history, sm.output.history, "history")
tables.write(prefs, sm.output.preferences, "preferences")
tables.write(state.to_frame(), sm.output.state, "state")
if "iteration" in sm.output.keys():  # the last round: the pairs every member trains on
    every = tables.read_many([*sm.input.earlier, sm.output.preferences], "preferences")
    tables.write(every, sm.output.iteration, "preferences")
    log.info("iteration %d: %d preference pairs", t, len(every))
    if len(every) == 0:
        log.warning("no preference pairs this iteration: every member stays unchanged")
scored = judgments[judgments["kind"] != "meta"]  # meta-rewarding's meta rows are no judgments of answers
unusable = int(scored["score"].isna().sum())
log.info(
    "iteration %d round %s (%s): %s; %d of %d judgments unusable",
    t,
    sm.params.round,
    method.name,
    counts,
    unusable,
    len(scored),
)
if counts.get("judge_pairs_formed") == 0:  # meta-rewarding
    log.warning("no judge pair formed this round: the members train on actor pairs only")
if counts.get("duels") and counts.get("tie", 0) > counts["duels"] / 2:
    log.warning("more than half of the duels tied: the judges hardly separate the answers")
for m, r, d, w in zip(state.members, state.reputation, state.deviation, state.weight):
    log.info("  %-16s reputation %8.3f  deviation %.3f  judge weight %.2f", m, r, d, w)
