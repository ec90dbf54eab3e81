# Aggregation, reputation updates and preference pairs.


rule aggregate:
    """Weighted judgment aggregation and Eq. (1), duel by duel in play order; each kept duel
    becomes a preference pair at its own time."""
    input:
        state=previous_state,
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
        responses=round_tables("responses"),
        judgments=round_tables("judgments"),
    output:
        state="results/{exp}/iter_{t}/round_{r}/state.parquet",
        history="results/{exp}/iter_{t}/round_{r}/history.parquet",
        preferences="results/{exp}/iter_{t}/round_{r}/preferences.parquet",
    params:
        method=method,
        baselines=baselines,
        **settings("reputation"),
    log:
        "results/{exp}/logs/iter_{t}/round_{r}/aggregate.log",
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
        preferences="results/{exp}/iter_{t}/preferences.parquet",
    log:
        "results/{exp}/logs/iter_{t}/gather_preferences.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/gather_preferences.py"


rule finalize:
    """The whole reputation history and the final standings of the run."""
    input:
        histories=run_tables("history.parquet"),
        state=last_state,
    output:
        history="results/{exp}/reputation_history.parquet",
        state="results/{exp}/final_state.parquet",
    log:
        "results/{exp}/logs/finalize.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/finalize.py"
