# Training: the short SFT that makes the embedded default's initial members, and the DPO of
# every member at the end of an iteration.


rule sft_member:
    """A member of the initial pool with an sft_domain: a short LoRA SFT on its domain."""
    input:
        base=base_marker,
        hub=HUB_INPUT,
        sft=sft_data,
    output:
        member=layout.member_json("{exp}", 0, "{member}"),
        adapter_config=layout.member_file("{exp}", 0, "{member}", "adapter/adapter_config.json"),
        adapter=layout.member_file("{exp}", 0, "{member}", "adapter/adapter_model.safetensors"),
        training_log=layout.member_file("{exp}", 0, "{member}", "training_log.parquet"),
    wildcard_constraints:
        member=alternatives(SFT_MEMBERS),
    params:
        tracking=tracking,
        member=lambda wc: as_data(MEMBER_SPECS[wc.member]),
        base=base_folder,
        **settings("runtime", "sft", "lora"),
    log:
        layout.log("{exp}", "init_{member}", t=0),
    benchmark:
        layout.benchmark("{exp}", "init_{member}", t=0)
    threads: model_threads("sft", "member")  # one job per member, always
    resources:
        **stage_resources("sft"),
    conda:
        MODEL_ENV
    script:
        "../workflow/scripts/sft_member.py"


for _rule in model_rules("dpo", fanout=DPO_FANOUT, t="{t}"):

    rule:
        """Member t -> member t+1: DPO on all pairs of iteration t (SPIN: and of the iterations
        before it, baselines.spin_history), continuing its own adapter against a frozen copy of
        it as the reference. One job per member (dpo_fanout: member) or per pool (a rule per
        pool: rules/common.smk, model_rules)."""
        name:
            _rule.name
        input:
            preferences=trained_preferences,
            members=served_member_jsons("member"),
        output:
            member=_rule.output(layout.member_json("{exp}", "{t}", "{member}")),
            adapter_config=_rule.output(layout.member_file("{exp}", "{t}", "{member}", "adapter/adapter_config.json")),
            adapter=_rule.output(layout.member_file("{exp}", "{t}", "{member}", "adapter/adapter_model.safetensors")),
            training_log=_rule.output(layout.member_file("{exp}", "{t}", "{member}", "training_log.parquet")),
        wildcard_constraints:
            t=r"[1-9]\d*",  # iteration 0's members come from sft_member / init_member
            **_rule.wildcards,
        params:
            members=_rule.served,
            tracking=tracking,
            method=method,
            baselines=baselines,
            **settings("runtime", "dpo", "lora"),
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
            "../workflow/scripts/dpo.py"
