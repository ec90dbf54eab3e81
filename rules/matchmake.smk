# Match-making: who fights whom in each round.


rule matchmake:
    """Duels of one round: prompts drawn for the iteration, first combatants balanced, each
    opponent drawn against the reputations at the start of the round."""
    input:
        prompts=data("alignment"),
        state=previous_state,
    output:
        duels=layout.round_table("{exp}", "{t}", "{r}", "duels"),
    params:
        members=lambda wc: members_of(wc.exp),
        per_iteration=lambda wc: run_of(wc).prompts.per_iteration,
        schedule=lambda wc: run_of(wc).prompts.schedule,
        seed=lambda wc: run_of(wc).seed,
        method=method,
        **settings("matchmaking"),
    log:
        layout.log("{exp}", "matchmake", t="{t}", r="{r}"),
    localrule: True
    conda:
        "../envs/core.yaml"
    script:
        "../workflow/scripts/matchmake.py"
