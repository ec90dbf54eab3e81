# Match-making: who fights whom in each round.


rule matchmake:
    """Duels of one round: prompts drawn for the iteration, first combatants balanced, each
    opponent drawn against the reputations at the start of the round."""
    input:
        prompts="results/{exp}/data/alignment.parquet",
        state=previous_state,
    output:
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
    params:
        members=MEMBERS,
        per_iteration=S.prompts.per_iteration,
        schedule=S.prompts.schedule,
        seed=S.seed,
        **settings("matchmaking"),
    log:
        "results/{exp}/logs/iter_{t}/round_{r}/matchmake.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/matchmake.py"
