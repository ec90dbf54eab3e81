# Sparta Alignment as a Snakemake workflow: see README.md and the paper.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/prepare.smk"
include: "rules/pool.smk"
include: "rules/matchmake.smk"
include: "rules/combat.smk"
include: "rules/judge.smk"
include: "rules/aggregate.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/report.smk"


rule all:
    input:
        final_outputs(requested_of),
    default_target: True
