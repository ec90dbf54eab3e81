"""rule init_state: every member starts with the same reputation and deviation."""

from sparta import tables
from sparta.logs import setup
from sparta.reputation import PoolState, ReputationParams

sm = snakemake  # noqa: F821
setup(sm.log[0])
params = ReputationParams(**sm.params.initial)
tables.write(PoolState.initial(sm.params.members, params).to_frame(), sm.output.state, "state")
