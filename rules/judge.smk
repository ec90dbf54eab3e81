# Cross-judging: the members not in a duel score both of its answers.

for _name, _members, _runs in pool_rules("judge"):

    rule:
        """Each judge scores both answers of every duel of the round it does not fight in. One
        job per judge (fanout: member) or one job for the whole pool (fanout: pool; a rule per
        pool: rules/common.smk, pool_rules)."""
        name:
            _name
        input:
            duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
            responses=round_tables("responses"),
            members=served_member_jsons("judge"),
        output:
            judgments=fanout_output(layout.member_table("{exp}", "{t}", "{r}", "judgments", "{judge}"), _members, "judge"),
        wildcard_constraints:
            **_runs,
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
