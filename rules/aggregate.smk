# Aggregation, reputation updates and preference pairs.


# Runs grouped by their rounds per iteration: the last round's aggregation also writes the
# iteration's preference set (every round's pairs: what the members train on), so an iteration
# of one round (the paper's) has one aggregation job and no job that only copies a table.
_BY_ROUNDS = {}
for _run in RUNS:
    _BY_ROUNDS.setdefault(len(rounds_of(_run)), []).append(_run)
_BY_ROUNDS = sorted(_BY_ROUNDS.items(), key=lambda group: -len(group[1]))  # most used first


for _i, (_rounds, _runs) in enumerate(_BY_ROUNDS):
    _suffix = "" if _i == 0 else f"_rounds{_rounds}"
    _exp = {"exp": alternatives(_runs)} if len(_BY_ROUNDS) > 1 else {}
    for _last in (True, False) if _rounds > 1 else (True,):
        # the last round's rule: its round a constant in its paths (every output of a rule
        # holds the same wildcards, and the iteration's preference set has no round)
        _r = str(_rounds - 1) if _last else "{r}"

        rule:
            """Weighted judgment aggregation and Eq. (1), duel by duel in play order; each kept
            duel becomes a preference pair at its own time. The iteration's last round (rule
            aggregate) also gathers every round's pairs into the iteration's preference set;
            the rounds before it are aggregate_round."""
            name:
                ("aggregate" if _last else "aggregate_round") + _suffix
            input:
                state=previous_state,
                duels=layout.round_table("{exp}", "{t}", _r, "duels"),
                responses=round_tables("responses"),
                judgments=round_tables("judgments"),
                earlier=earlier_preferences if _last else [],
            output:
                state=layout.round_table("{exp}", "{t}", _r, "state"),
                history=layout.round_table("{exp}", "{t}", _r, "history"),
                preferences=layout.round_table("{exp}", "{t}", _r, "preferences"),
                **({"iteration": layout.preferences("{exp}", "{t}")} if _last else {}),
            wildcard_constraints:
                **({} if _last else {"r": alternatives([str(r) for r in range(_rounds - 1)])}),
                **_exp,
            params:
                round=round_of,
                method=method,
                baselines=baselines,
                **settings("reputation"),
            log:
                layout.log("{exp}", "aggregate", t="{t}", r=_r),
            localrule: True
            conda:
                "../envs/core.yaml"
            script:
                "../workflow/scripts/aggregate.py"


rule finalize:
    """The whole reputation history and the final standings of the run."""
    input:
        histories=run_tables("history"),
        state=last_state,
    output:
        history=layout.run_file("{exp}", "reputation_history.parquet"),
        state=layout.run_file("{exp}", "final_state.parquet"),
    log:
        layout.log("{exp}", "finalize"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/finalize.py"
