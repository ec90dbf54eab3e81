# The initial pool (iteration 0): members and their starting reputations.


rule init_member:
    """A member of the initial pool without SFT: its configured adapter, or the base alone.
    (Members with an sft_domain come from rule sft_member, in train.smk.)"""
    input:
        base=base_marker,
        hub=HUB_INPUT,
    output:
        member=layout.member_json("{exp}", 0, "{member}"),
    wildcard_constraints:
        member=alternatives([m for m in MEMBERS if m not in SFT_MEMBERS and not from_hub(m)]),
    params:
        member=lambda wc: as_data(MEMBER_SPECS[wc.member]),
        base=base_folder,
    log:
        layout.log("{exp}", "init_{member}", t=0),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/init_member.py"


rule init_state:
    """Every member starts with the same reputation and deviation (fair start)."""
    output:
        state=layout.initial_state("{exp}"),
    params:
        members=lambda wc: members_of(wc.exp),
        initial=lambda wc: {
            "initial_reputation": run_of(wc).reputation.initial_reputation,
            "initial_deviation": run_of(wc).reputation.initial_deviation,
        },
    log:
        layout.log("{exp}", "init_state", t=0),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/init_state.py"


rule hub_download:
    """Every hf:// hub id of the runs into the Hugging Face cache, once (files already there
    are not fetched again), and the manifest model jobs resolve ids with (sparta/hub.py). A
    local rule: it runs where snakemake runs (a cluster's login node, with the network)."""
    output:
        manifest=layout.hub_manifest(),
    params:
        ids=HUB_IDS,
        offline=hub.USER_OFFLINE,
        # the adapters are checked against what it serves (untracked: a finished run's download
        # job is not redone for it; the config check reads the cached adapters at every start)
        backend=Untracked(WIDE.backend),
    log:
        layout.hub_log(),
    localrule: True
    conda:
        "../envs/local.yaml"  # no torch: the login node builds no model env for it
    script:
        "../workflow/scripts/hub_download.py"


rule hub_dataset:
    """One (config, split) of a hub dataset (prompts.dataset, evaluation.tasks[].dataset) from
    its snapshot in the Hugging Face cache (rule hub_download) to Parquet under results/_data/,
    once for every run that reads it. A local rule: no model, no network."""
    input:
        hub=HUB_INPUT,
    output:
        data=layout.hub_dataset("{dataset}"),
    params:
        source=lambda wc: HUB_DATASETS[wc.dataset],
    log:
        layout.hub_dataset_log("{dataset}"),
    wildcard_constraints:
        dataset=alternatives(HUB_DATASETS),
    localrule: True
    conda:
        "../envs/local.yaml"  # no torch: the login node builds no model env for it
    script:
        "../workflow/scripts/hub_dataset.py"


rule init_hub_member:
    """An initial member whose base or adapter is a hub id: member.json keeps the id (model
    jobs resolve it through the manifest to the cached snapshot)."""
    input:
        hub=HUB_INPUT,
    output:
        member=layout.member_json("{exp}", 0, "{member}"),
    wildcard_constraints:
        member=alternatives([m for m in MEMBERS if m not in SFT_MEMBERS and from_hub(m)]),
    params:
        member=lambda wc: as_data(MEMBER_SPECS[wc.member]),
        base=base_folder,
    log:
        layout.log("{exp}", "init_{member}", t=0),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/init_hub_member.py"
