"""rule finalize: the whole reputation history and the final state."""

from sparta import tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
tables.write(tables.read_many(sm.input.histories, "history"), sm.output.history, "reputation_history")
state = tables.read(sm.input.state, "state")
tables.write(state, sm.output.state, "final_state")
standings = state.sort_values("reputation", ascending=False)
log.info(
    "final standings:\n%s",
    standings[["member", "reputation", "deviation", "judge_weight"]].to_string(index=False),
)
