# The inputs every experiment starts from: converted base models and the prompt splits.


rule convert_gguf:
    """Convert a GGUF shipped in a Python package once to a safetensors folder that every
    experiment shares (later loads take seconds instead of a minute)."""
    output:
        config=f"{layout.base_dir('{base}')}/config.json",
    params:
        spec=lambda wc: as_data(next(s.base_models[wc.base] for s in RUNS.values() if wc.base in s.base_models)),
        folder=lambda wc: layout.base_dir(wc.base),
    log:
        layout.base_log("{base}"),
    benchmark:
        layout.base_log("{base}", benchmark=True)
    resources:
        **stage_resources("convert"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/convert_gguf.py"


rule split_prompts:
    """Split the prompt file with the seed into alignment, validation and test, without the
    prompts too long for the bases' context (prompts.too_long: skip; stop fails naming them)."""
    input:
        prompts=prompt_file,
        bases=prompt_base_markers,
    output:
        alignment=layout.data("{exp}", "alignment"),
        validation=layout.data("{exp}", "validation"),
        test=layout.data("{exp}", "test"),
    params:
        prompts=lambda wc: run_of(wc).prompts.split_keys(),
        seed=lambda wc: run_of(wc).seed,
        lengths=prompt_lengths,
        budget=prompt_budget,
    log:
        layout.log("{exp}", "split_prompts"),
    localrule: True
    conda:
        "../envs/local.yaml"  # no torch: the login node builds no model env for it
    script:
        "../workflow/scripts/split_prompts.py"
