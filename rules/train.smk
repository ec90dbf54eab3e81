# DPO of every member at the end of an iteration.


rule dpo:
    """Member t -> member t+1: DPO on all pairs of iteration t, continuing its own adapter
    against a frozen copy of it as the reference."""
    input:
        preferences="results/{exp}/iter_{t}/preferences.parquet",
        member=member_json,
    output:
        member="results/{exp}/iter_{t}/members/{member}/member.json",
    wildcard_constraints:
        t=r"[1-9]\d*",  # iteration 0's members come from sft_member / init_member
    params:
        dpo=config["dpo"],
        lora=config["lora"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        "results/{exp}/logs/iter_{t}/dpo_{member}.log",
    benchmark:
        "results/{exp}/benchmarks/iter_{t}/dpo_{member}.tsv"
    threads: 2
    resources:
        **stage_resources("dpo"),
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/dpo.py"
