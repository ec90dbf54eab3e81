# The base models, the prompt splits and the initial pool (iteration 0).


rule convert_gguf:
    """Convert a GGUF shipped in a Python package once to a safetensors folder that every
    experiment shares (later loads take seconds instead of a minute)."""
    output:
        config="results/_bases/{base}/config.json",
    params:
        spec=lambda wc: config["base_models"][wc.base],
        folder=lambda wc: f"results/_bases/{wc.base}",
    log:
        "results/_bases/logs/convert_{base}.log",
    benchmark:
        "results/_bases/logs/convert_{base}.benchmark.tsv"
    resources:
        **stage_resources("convert"),
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/convert_gguf.py"


rule split_prompts:
    """Split the prompt file with the seed into alignment, validation and test."""
    input:
        config["prompts"]["file"],
    output:
        alignment="results/{exp}/data/alignment.parquet",
        validation="results/{exp}/data/validation.parquet",
        test="results/{exp}/data/test.parquet",
    params:
        prompts=config["prompts"],
        seed=config["seed"],
    log:
        "results/{exp}/logs/split_prompts.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/split_prompts.py"


rule sft_member:
    """A member of the initial pool with an sft_domain: a short LoRA SFT on its domain."""
    input:
        base=base_marker,
        sft=sft_data,
    output:
        member="results/{exp}/iter_0/members/{member}/member.json",
    wildcard_constraints:
        member=alternatives(SFT_MEMBERS),
    params:
        spec=lambda wc: MEMBER_SPECS[wc.member],
        base=lambda wc: base_folder(wc.member),
        sft=config["sft"],
        lora=config["lora"],
        seed=config["seed"],
        system=config["system_prompt"],
        device=config["device"],
        dtype=config["dtype"],
    log:
        "results/{exp}/logs/iter_0/init_{member}.log",
    benchmark:
        "results/{exp}/benchmarks/iter_0/init_{member}.tsv"
    threads: 2
    resources:
        **stage_resources("sft"),
    conda:
        "../envs/train.yaml"
    script:
        "../workflow/scripts/init_member.py"


rule init_member:
    """A member of the initial pool without SFT: its configured adapter, or the base alone."""
    input:
        base=base_marker,
    output:
        member="results/{exp}/iter_0/members/{member}/member.json",
    wildcard_constraints:
        member=alternatives([m for m in MEMBERS if m not in SFT_MEMBERS]),
    params:
        spec=lambda wc: MEMBER_SPECS[wc.member],
        base=lambda wc: base_folder(wc.member),
    log:
        "results/{exp}/logs/iter_0/init_{member}.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/init_member.py"


rule init_state:
    """Every member starts with the same reputation and deviation (fair start)."""
    output:
        state="results/{exp}/iter_0/state.parquet",
    params:
        members=MEMBERS,
        reputation=config["reputation"],
    log:
        "results/{exp}/logs/iter_0/init_state.log",
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/init_state.py"
