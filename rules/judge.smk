# Cross-judging: the members not in a duel score both of its answers.


rule judge:
    """Each judge scores both answers of every duel of the round it does not fight in. One
    job per judge (fanout: member) or one job for the whole pool (fanout: pool)."""
    input:
        duels="results/{exp}/iter_{t}/round_{r}/duels.parquet",
        responses=round_tables("responses"),
        members=served_member_jsons("judge"),
    output:
        judgments=fanout_output("results/{exp}/iter_{t}/round_{r}/judgments/{judge}.parquet", "judge"),
    params:
        judges=lambda wc: served(wc, "judge"),
        method=method,
        baselines=baselines,
        **settings("runtime", "backend", "judge"),
    log:
        f"results/{{exp}}/logs/iter_{{t}}/round_{{r}}/{fanout_name('judge', 'judge')}.log",
    benchmark:
        f"results/{{exp}}/benchmarks/iter_{{t}}/round_{{r}}/{fanout_name('judge', 'judge')}.tsv"
    threads: model_threads("judge")
    resources:
        **stage_resources("judge"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/judge.py"
