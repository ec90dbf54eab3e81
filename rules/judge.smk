# Cross-judging.


rule judge:
    """One judge scores both answers of every duel of the round it does not fight in."""
    input:
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
        responses=round_responses,
        member=judge_member_json,
    output:
        judgments="results/{exp}/iter_{t}/round_{r}/judgments/{judge}.parquet",
    params:
        judge=config["judge"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        "results/{exp}/logs/iter_{t}/round_{r}/judge_{judge}.log",
    benchmark:
        "results/{exp}/benchmarks/iter_{t}/round_{r}/judge_{judge}.tsv"
    threads: 1
    resources:
        mem_mb=16000,
        runtime=lambda wc, attempt: 60 * attempt,
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/judge.py"
