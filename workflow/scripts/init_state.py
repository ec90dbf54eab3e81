"""rule init_state."""

from sparta import tables
from sparta.config import reputation_params
from sparta.logs import setup
from sparta.reputation import PoolState

sm = snakemake  # noqa: F821
setup(sm.log[0])
params = reputation_params({"reputation": sm.params.reputation})
tables.write(PoolState.initial(sm.params.members, params).to_frame(), sm.output.state, "state")
