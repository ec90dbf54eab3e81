# Cross-judging: the members not in a duel score both of its answers.

for _rule in model_rules("judge", key="judge", t="{t}", r="{r}"):

    rule:
        """Each judge scores both answers of every duel of the round it does not fight in. One
        job per judge (fanout: member) or one job for the whole pool (fanout: pool; a rule per
        pool: rules/common.smk, model_rules)."""
        name:
            _rule.name
        input:
            duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
            responses=round_tables("responses"),
            members=served_member_jsons("judge"),
        output:
            judgments=_rule.output(layout.member_table("{exp}", "{t}", "{r}", "judgments", "{judge}")),
        wildcard_constraints:
            **_rule.wildcards,
        params:
            judges=_rule.served,
            method=method,
            baselines=baselines,
            **settings("runtime", "backend", "judge"),
        log:
            _rule.log,
        benchmark:
            _rule.benchmark
        threads: _rule.threads
        resources:
            **_rule.resources,
        conda:
            MODEL_ENV
        script:
            "../workflow/scripts/judge.py"
