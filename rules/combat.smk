# Combat: both members of every duel answer its prompt.

for _rule in model_rules("combat", t="{t}", r="{r}"):

    rule:
        """Each member answers every prompt of the round's duels it fights in (batched). One job
        per member (fanout: member) or one job for the whole pool (fanout: pool; a rule per pool:
        rules/common.smk, model_rules)."""
        name:
            _rule.name
        input:
            duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
            members=served_member_jsons("member"),
        output:
            responses=_rule.output(layout.member_table("{exp}", "{t}", "{r}", "responses", "{member}")),
        wildcard_constraints:
            **_rule.wildcards,
        params:
            members=_rule.served,
            method=method,
            baselines=baselines,
            **settings("runtime", "backend", "generation"),
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
            "../workflow/scripts/combat.py"
