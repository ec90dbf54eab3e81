# Cross-judging: the members not in a duel score both of its answers.


rule judge:
    """Each judge scores both answers of every duel of the round it does not fight in. One
    job per judge (fanout: member) or one job for the whole pool (fanout: pool)."""
    input:
        duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
        responses=round_tables("responses"),
        members=served_member_jsons("judge"),
    output:
        judgments=fanout_output(layout.member_table("{exp}", "{t}", "{r}", "judgments", "{judge}"), "judge"),
    wildcard_constraints:
        **pool_runs(),
    params:
        judges=served_names("judge"),
        method=method,
        baselines=baselines,
        **settings("runtime", "backend", "judge"),
    log:
        layout.log("{exp}", fanout_name("judge", "judge"), t="{t}", r="{r}"),
    benchmark:
        layout.benchmark("{exp}", fanout_name("judge", "judge"), t="{t}", r="{r}")
    threads: model_threads("judge")
    resources:
        **stage_resources("judge"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/judge.py"


if per_member_runs():  # pool sizes under fanout pool (rules/common.smk: POOL)

    use rule judge as judge_per_member with:
        output:
            judgments=layout.member_table("{exp}", "{t}", "{r}", "judgments", "{judge}"),
        wildcard_constraints:
            exp=alternatives(OTHER_POOL_RUNS),
        log:
            layout.log("{exp}", "judge_{judge}", t="{t}", r="{r}"),
        benchmark:
            layout.benchmark("{exp}", "judge_{judge}", t="{t}", r="{r}")
        threads: model_threads("judge", "member")
