# Combat: both members of every duel answer its prompt.


rule combat:
    """Each member answers every prompt of the round's duels it fights in (batched). One job
    per member (fanout: member) or one job for the whole pool (fanout: pool)."""
    input:
        duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
        members=served_member_jsons("member"),
    output:
        responses=fanout_output(layout.member_table("{exp}", "{t}", "{r}", "responses", "{member}")),
    wildcard_constraints:
        **pool_runs(),
    params:
        members=served_names(),
        method=method,
        baselines=baselines,
        **settings("runtime", "backend", "generation"),
    log:
        layout.log("{exp}", fanout_name("combat"), t="{t}", r="{r}"),
    benchmark:
        layout.benchmark("{exp}", fanout_name("combat"), t="{t}", r="{r}")
    threads: model_threads("combat")
    resources:
        **stage_resources("combat"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/combat.py"


if per_member_runs():  # pool sizes under fanout pool (rules/common.smk: POOL)

    use rule combat as combat_per_member with:
        output:
            responses=layout.member_table("{exp}", "{t}", "{r}", "responses", "{member}"),
        wildcard_constraints:
            exp=alternatives(OTHER_POOL_RUNS),
        log:
            layout.log("{exp}", "combat_{member}", t="{t}", r="{r}"),
        benchmark:
            layout.benchmark("{exp}", "combat_{member}", t="{t}", r="{r}")
        threads: model_threads("combat", "member")
