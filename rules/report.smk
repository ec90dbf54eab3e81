# The paper's analyses, the figures of the HTML report (snakemake --report), and the
# resolved settings of the run.


rule record_settings:
    """Every setting of the run with its defaults filled in (what `sparta config` prints)."""
    output:
        settings="results/{exp}/settings.yaml",
    params:
        settings=lambda wc: run_of(wc).to_dict(),
    log:
        "results/{exp}/logs/record_settings.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/record_settings.py"


rule analyze:
    """Diversity, lengths, label accuracy, reputation against performance, standings."""
    input:
        duels=run_tables("duels.parquet"),
        states=run_tables("state.parquet"),
        responses=run_tables("responses/{member}.parquet"),
        judgments=run_tables("judgments/{member}.parquet"),
        preferences=iteration_preferences,
        history="results/{exp}/reputation_history.parquet",
        evaluation=optional_evaluation,
        training_logs=all_training_logs,
        pair_accuracy=held_out_accuracy,
    output:
        diversity="results/{exp}/analysis/diversity.parquet",
        lengths="results/{exp}/analysis/lengths.parquet",
        label_accuracy="results/{exp}/analysis/label_accuracy.parquet",
        judge_accuracy="results/{exp}/analysis/judge_label_accuracy.parquet",
        correlation="results/{exp}/analysis/reputation_vs_performance.parquet",
        standings="results/{exp}/analysis/standings.parquet",
        reward_hacking="results/{exp}/analysis/reward_hacking.parquet",
        training="results/{exp}/analysis/training.parquet",
        pair_accuracy="results/{exp}/analysis/pair_accuracy.parquet",
    params:
        method=method,
        **settings("analysis"),
    log:
        "results/{exp}/logs/analyze.log",
    benchmark:
        "results/{exp}/benchmarks/analyze.tsv"
    resources:
        mem_mb=8000,
        runtime=lambda wc, attempt: 60 * attempt,
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/analyze.py"


rule plots:
    """Figures of the report, each with a caption."""
    input:
        history="results/{exp}/reputation_history.parquet",
        judgments=run_tables("judgments/{member}.parquet"),
        label_accuracy="results/{exp}/analysis/label_accuracy.parquet",
        diversity="results/{exp}/analysis/diversity.parquet",
        reward_hacking="results/{exp}/analysis/reward_hacking.parquet",
        training="results/{exp}/analysis/training.parquet",
        pair_accuracy="results/{exp}/analysis/pair_accuracy.parquet",
        evaluation=optional_evaluation,
    output:
        reputation=report(
            "results/{exp}/report/reputation.png",
            caption="../workflow/report/reputation.rst",
            category="Reputation",
        ),
        wins=report(
            "results/{exp}/report/win_matrix.png",
            caption="../workflow/report/win_matrix.rst",
            category="Reputation",
        ),
        scores=report(
            "results/{exp}/report/judge_scores.png",
            caption="../workflow/report/judge_scores.rst",
            category="Judging",
        ),
        label_accuracy=report(
            "results/{exp}/report/label_accuracy.png",
            caption="../workflow/report/label_accuracy.rst",
            category="Judging",
        ),
        diversity=report(
            "results/{exp}/report/diversity.png",
            caption="../workflow/report/diversity.rst",
            category="Analysis",
        ),
        training=report(
            "results/{exp}/report/training.png",
            caption="../workflow/report/training.rst",
            category="Training",
        ),
        reward_hacking=report(
            "results/{exp}/report/reward_hacking.png",
            caption="../workflow/report/reward_hacking.rst",
            category="Judging",
        ),
        evaluation=report(
            "results/{exp}/report/evaluation.png",
            caption="../workflow/report/evaluation.rst",
            category="Evaluation",
        ),
    log:
        "results/{exp}/logs/plots.log",
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
        pairs=lambda wc: f"results/{wc.exp}/iter_{int(wc.t) + 1}/preferences.parquet",
    output:
        accuracy="results/{exp}/analysis/pair_accuracy/iter_{t}.parquet",
    params:
        **settings("runtime", "backend", "evaluation"),
    log:
        "results/{exp}/logs/analysis/pair_accuracy_iter_{t}.log",
    benchmark:
        "results/{exp}/benchmarks/analysis/pair_accuracy_iter_{t}.tsv"
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
        study_inputs,
    output:
        comparison="results/{study}/comparison.parquet",
        table=report(
            "results/{study}/comparison.tsv",
            caption="../workflow/report/comparison.rst",
            category="Study",
        ),
        cost="results/{study}/cost.parquet",
    params:
        runs=study_runs,
    log:
        "results/{study}/logs/compare.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/compare.py"


rule compare_figure:
    """The study's figure: every experiment's difference to best init with its interval, and
    the inference each spent."""
    input:
        comparison="results/{study}/comparison.parquet",
        cost="results/{study}/cost.parquet",
    output:
        report("results/{study}/comparison.png", caption="../workflow/report/comparison_figure.rst", category="Study"),
    log:
        "results/{study}/logs/compare_figure.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/compare_figure.py"
