# The initial pool (iteration 0): members and their starting reputations.


rule init_member:
    """A member of the initial pool without SFT: its configured adapter, or the base alone.
    (Members with an sft_domain come from rule sft_member, in train.smk.)"""
    input:
        base=base_marker,
    output:
        member=layout.member_json("{exp}", 0, "{member}"),
    wildcard_constraints:
        member=alternatives([m for m in MEMBERS if m not in SFT_MEMBERS]),
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
