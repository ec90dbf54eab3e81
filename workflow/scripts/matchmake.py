"""rule matchmake: the duels of one round, against the reputations at its start (Sparta), or
every member against itself on every prompt of the iteration (a baseline)."""

from sparta import tables
from sparta.logs import setup
from sparta.matchmaking import plan_iteration
from sparta.methods import get
from sparta.reputation import PoolState
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
job = job_settings(sm)
mm, seed = job.matchmaking, sm.params.seed
t, r = int(sm.wildcards.t), int(sm.wildcards.r)
state = PoolState.from_frame(tables.read(sm.input.state, "state"))
prompts = tables.read(sm.input.prompts, "prompts")
members, n = sm.params.members, sm.params.per_iteration
method = get(sm.params.method)  # Sparta's match-making, or every member against itself
plan = plan_iteration(prompts, members, n, method.rounds(job), seed, t, schedule=sm.params.schedule)
duels = method.duels(plan, members, state.reputations(), mm, seed, t=t, r=r)
tables.write(duels, sm.output.duels, "duels")
pairs = duels.groupby(["member_a", "member_b"]).size().to_dict()
log.info("iteration %d round %d (%s): %d duels; pairs %s", t, r, sm.params.method, len(duels), pairs)
