# Evaluation of every member of every checkpoint, and best-member selection.


for _rule in model_rules("evaluate_member", "evaluate", where=layout.checkpoint_where("{c}")):

    rule:
        """A member at checkpoint c (0 = initial pool) on every task's validation and test
        split. One job per member (fanout: member) or per checkpoint for the whole pool (fanout:
        pool; a rule per pool: rules/common.smk, model_rules)."""
        name:
            _rule.name
        input:
            members=checkpoint_member_jsons("member"),
            validation=data("validation"),
            test=data("test"),
            tasks=evaluation_task_files,
        output:
            scores=_rule.output(layout.evaluation("{exp}", "{c}", "{member}")),
        wildcard_constraints:
            **_rule.wildcards,
        params:
            members=_rule.served,
            **settings("runtime", "backend", "evaluation"),
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
            "../workflow/scripts/evaluate_member.py"


rule evaluation_table:
    """Scores of every member over checkpoints, and per task the best member on validation
    (initial pool, final members, and the run's selection: evaluation.select_from) reported
    on test."""
    input:
        all_evaluations,
    output:
        scores=layout.evaluation_file("{exp}", layout.SCORES),
        selection=layout.evaluation_file("{exp}", layout.SELECTION),
        table=report(
            layout.evaluation_file("{exp}", "selection.tsv"),
            caption="../workflow/report/selection.rst",
            category="Evaluation",
        ),
    params:
        **settings("evaluation"),
    log:
        layout.log("{exp}", "table", where="evaluation"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/evaluation_table.py"
