# The paper's analyses, the figures of the HTML report (snakemake --report), and the
# resolved settings of the run.


rule record_settings:
    """Every setting of the run with its defaults filled in (what `sparta config` prints)."""
    output:
        settings=layout.run_file("{exp}", layout.SETTINGS),
    params:
        # (but replace_finished, a choice of one command) and, for a config of its own pool,
        # what it still takes from config.yaml's toy
        settings=lambda wc: {
            **finished.recorded(run_of(wc)),
            **({"from_embedded_default": EMBEDDED_LEFTOVERS} if EMBEDDED_LEFTOVERS else {}),
        },
    log:
        layout.log("{exp}", "record_settings"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/record_settings.py"


rule analyze:
    """Diversity, lengths, label accuracy, reputation against performance, standings, and
    the judging (unusable, failed and shortened judgments; judge pairs that formed)."""
    input:
        duels=run_tables("duels"),
        states=run_tables("state"),
        responses=run_tables("responses"),
        judgments=run_tables("judgments"),
        preferences=iteration_preferences,
        history=layout.run_file("{exp}", "reputation_history.parquet"),
        evaluation=optional_evaluation,
        training_logs=all_training_logs,
        pair_accuracy=held_out_accuracy,
    output:
        diversity=layout.analysis("{exp}", "diversity"),
        pairs=layout.analysis("{exp}", "pairs"),
        lengths=layout.analysis("{exp}", "lengths"),
        label_accuracy=layout.analysis("{exp}", "label_accuracy"),
        judge_label_accuracy=layout.analysis("{exp}", "judge_label_accuracy"),
        reputation_vs_performance=layout.analysis("{exp}", "reputation_vs_performance"),
        standings=layout.analysis("{exp}", "standings"),
        reward_hacking=layout.analysis("{exp}", "reward_hacking"),
        training=layout.analysis("{exp}", "training"),
        pair_accuracy=layout.analysis("{exp}", "pair_accuracy"),
        judging=layout.analysis("{exp}", "judging"),
    params:
        method=method,
        baselines=baselines,
        **settings("analysis"),
    log:
        layout.log("{exp}", "analyze"),
    benchmark:
        layout.benchmark("{exp}", "analyze")
    resources:
        **slurm_job("rule analyze", 0, 8000, 60),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/analyze.py"


rule plots:
    """Figures of the report, each with a caption."""
    input:
        history=layout.run_file("{exp}", "reputation_history.parquet"),
        judgments=run_tables("judgments"),
        label_accuracy=layout.analysis("{exp}", "label_accuracy"),
        judge_label_accuracy=layout.analysis("{exp}", "judge_label_accuracy"),
        diversity=layout.analysis("{exp}", "diversity"),
        reward_hacking=layout.analysis("{exp}", "reward_hacking"),
        training=layout.analysis("{exp}", "training"),
        pair_accuracy=layout.analysis("{exp}", "pair_accuracy"),
        evaluation=optional_evaluation,
    output:
        reputation=report(
            layout.figure("{exp}", "reputation"),
            caption="../workflow/report/reputation.rst",
            category="Reputation",
        ),
        wins=report(
            layout.figure("{exp}", "win_matrix"),
            caption="../workflow/report/win_matrix.rst",
            category="Reputation",
        ),
        scores=report(
            layout.figure("{exp}", "judge_scores"),
            caption="../workflow/report/judge_scores.rst",
            category="Judging",
        ),
        label_accuracy=report(
            layout.figure("{exp}", "label_accuracy"),
            caption="../workflow/report/label_accuracy.rst",
            category="Judging",
        ),
        diversity=report(
            layout.figure("{exp}", "diversity"),
            caption="../workflow/report/diversity.rst",
            category="Analysis",
        ),
        training=report(
            layout.figure("{exp}", "training"),
            caption="../workflow/report/training.rst",
            category="Training",
        ),
        reward_hacking=report(
            layout.figure("{exp}", "reward_hacking"),
            caption="../workflow/report/reward_hacking.rst",
            category="Judging",
        ),
        evaluation=report(
            layout.figure("{exp}", "evaluation"),
            caption="../workflow/report/evaluation.rst",
            category="Evaluation",
        ),
    log:
        layout.log("{exp}", "plots"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/plots.py"


rule pair_accuracy:
    """Held-out preference accuracy: every member before and after its DPO of iteration t,
    scored on the pairs of iteration t + 1 (never trained on)."""
    input:
        before=lambda wc: [member_json(wc, member=m) for m in members_of(wc.exp)],
        after=lambda wc: [member_json(wc, member=m, t=int(wc.t) + 1) for m in members_of(wc.exp)],
        pairs=lambda wc: layout.preferences(wc.exp, int(wc.t) + 1),
    output:
        accuracy=layout.pair_accuracy("{exp}", "{t}"),
    params:
        **settings("runtime", "backend", "evaluation"),
    log:
        layout.log("{exp}", layout.pair_accuracy_name("{t}"), where="analysis"),
    benchmark:
        layout.benchmark("{exp}", layout.pair_accuracy_name("{t}"), where="analysis")
    threads: model_threads("evaluate", "pool")
    resources:
        **stage_resources("evaluate"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/pair_accuracy.py"


rule compare:
    """The study's comparison (the paper's Table 1): per task and experiment the best member
    on validation, on test, with paired bootstrap intervals against best init and Sparta; and
    the inference each method spent."""
    input:
        unpack(study_inputs),
    output:
        comparison=layout.study_file("{study}", layout.COMPARISON),
        table=report(
            layout.study_file("{study}", "comparison.tsv"),
            caption="../workflow/report/comparison.rst",
            category="Study",
        ),
        cost=layout.study_file("{study}", layout.COST),
    params:
        runs=study_runs,
    log:
        layout.log("{study}", "compare"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/compare.py"


rule compare_figure:
    """The study's figure: every experiment's difference to best init with its interval, and
    the inference each spent."""
    input:
        comparison=layout.study_file("{study}", layout.COMPARISON),
        cost=layout.study_file("{study}", layout.COST),
    output:
        report(layout.study_file("{study}", "comparison.png"), caption="../workflow/report/comparison_figure.rst", category="Study"),
    log:
        layout.log("{study}", "compare_figure"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/compare_figure.py"
