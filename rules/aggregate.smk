# Aggregation, reputation updates and preference pairs.


rule aggregate:
    """Weighted judgment aggregation and Eq. (1), duel by duel in play order; each kept duel
    becomes a preference pair at its own time."""
    input:
        state=previous_state,
        duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
        responses=round_tables("responses"),
        judgments=round_tables("judgments"),
    output:
        state=layout.round_table("{exp}", "{t}", "{r}", "state"),
        history=layout.round_table("{exp}", "{t}", "{r}", "history"),
        preferences=layout.round_table("{exp}", "{t}", "{r}", "preferences"),
    params:
        method=method,
        baselines=baselines,
        **settings("reputation"),
    log:
        layout.log("{exp}", "aggregate", t="{t}", r="{r}"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/aggregate.py"


rule gather_preferences:
    """All preference pairs of an iteration: what every member trains on."""
    input:
        rounds=iteration_tables("preferences"),
    output:
        preferences=layout.preferences("{exp}", "{t}"),
    log:
        layout.log("{exp}", "gather_preferences", t="{t}"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/gather_preferences.py"


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
