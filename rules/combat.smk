# Combat: both members of every duel answer its prompt.

for _name, _members, _runs in pool_rules("combat"):

    rule:
        """Each member answers every prompt of the round's duels it fights in (batched). One job
        per member (fanout: member) or one job for the whole pool (fanout: pool; a rule per pool:
        rules/common.smk, pool_rules)."""
        name:
            _name
        input:
            duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
            members=served_member_jsons("member"),
        output:
            responses=fanout_output(layout.member_table("{exp}", "{t}", "{r}", "responses", "{member}"), _members),
        wildcard_constraints:
            **_runs,
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
