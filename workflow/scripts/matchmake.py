"""rule matchmake."""

from sparta import tables
from sparta.config import match_params, reputation_params
from sparta.logs import setup
from sparta.matchmaking import match_round, plan_iteration
from sparta.reputation import PoolState, begin_iteration

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
t, r = int(sm.wildcards.t), int(sm.wildcards.r)
mm = sm.params.matchmaking
state = PoolState.from_frame(tables.read(sm.input.state, "state"))
begin_iteration(state, t, reputation_params({"reputation": sm.params.reputation}))
prompts = tables.read(sm.input.prompts, "prompts")
plan = plan_iteration(prompts, sm.params.members, sm.params.per_iteration, mm["rounds_per_iteration"],
                      sm.params.seed, t)  # fmt: skip
duels = match_round(plan, sm.params.members, state.reputations(), match_params({"matchmaking": mm}),
                    sm.params.seed, r)  # fmt: skip
tables.write(duels, sm.output.duels, "duels")
log.info("iteration %d round %d: %d duels; pairs %s", t, r, len(duels),
         duels.groupby(["model_a", "model_b"]).size().to_dict())  # fmt: skip
