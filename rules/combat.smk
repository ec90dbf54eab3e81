# Combat: both members of every duel answer its prompt.


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
        method=method,
        baselines=baselines,
        **settings("runtime", "backend", "generation"),
    log:
        f"results/{{exp}}/logs/iter_{{t}}/round_{{r}}/{fanout_name('combat')}.log",
    benchmark:
        f"results/{{exp}}/benchmarks/iter_{{t}}/round_{{r}}/{fanout_name('combat')}.tsv"
    threads: model_threads("combat")
    resources:
        **stage_resources("combat"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/combat.py"
