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
    """Each member answers every prompt of the round's duels it fights in (batched). One job
    per member (fanout: member) or one job for the whole pool (fanout: pool)."""
    input:
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
        members=served_member_jsons("member"),
    output:
        responses=fanout_output("results/{exp}/iter_{t}/round_{r}/responses/{member}.parquet"),
    params:
        members=lambda wc: served(wc),
        backend=config["backend"],
        vllm=config["vllm"],
        generation=config["generation"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        f"results/{{exp}}/logs/iter_{{t}}/round_{{r}}/{fanout_name('combat')}.log",
    benchmark:
        f"results/{{exp}}/benchmarks/iter_{{t}}/round_{{r}}/{fanout_name('combat')}.tsv"
    threads: 1
    resources:
        **stage_resources("combat"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/combat.py"
