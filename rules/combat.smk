# Match-making and combat.


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
        matchmaking=config["matchmaking"],
        reputation=config["reputation"],
        per_iteration=config["prompts"]["per_iteration"],
        seed=config["seed"],
    log:
        "results/{exp}/logs/iter_{t}/round_{r}/matchmake.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/matchmake.py"


rule combat:
    """One member answers every prompt of the round's duels it fights in (batched)."""
    input:
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
        member=member_json,
    output:
        responses="results/{exp}/iter_{t}/round_{r}/responses/{member}.parquet",
    params:
        generation=config["generation"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        "results/{exp}/logs/iter_{t}/round_{r}/combat_{member}.log",
    benchmark:
        "results/{exp}/benchmarks/iter_{t}/round_{r}/combat_{member}.tsv"
    threads: 1
    resources:
        mem_mb=16000,
        runtime=lambda wc, attempt: 60 * attempt,
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/combat.py"
