# Evaluation of every member of every checkpoint, and best-member selection.


rule evaluate_member:
    """One member at checkpoint t (0 = initial pool) on every task's validation and test split."""
    input:
        member="results/{exp}/iter_{t}/members/{member}/member.json",
        validation="results/{exp}/data/validation.parquet",
        test="results/{exp}/data/test.parquet",
        tasks=evaluation_task_files,
    output:
        scores="results/{exp}/evaluation/checkpoint_{t}/{member}.parquet",
    params:
        evaluation=config["evaluation"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        "results/{exp}/logs/evaluation/checkpoint_{t}/{member}.log",
    benchmark:
        "results/{exp}/benchmarks/evaluation/checkpoint_{t}/{member}.tsv"
    threads: 1
    resources:
        mem_mb=16000,
        runtime=lambda wc, attempt: 60 * attempt,
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/evaluate_member.py"


rule evaluation_table:
    """Scores of every member over checkpoints, and per task the best member on validation
    (initial pool and final members) reported on test."""
    input:
        all_evaluations,
    output:
        scores="results/{exp}/evaluation/scores.parquet",
        selection="results/{exp}/evaluation/selection.parquet",
        table=report(
            "results/{exp}/evaluation/selection.tsv",
            caption="../workflow/report/selection.rst",
            category="Evaluation",
        ),
    log:
        "results/{exp}/logs/evaluation/table.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/evaluation_table.py"
