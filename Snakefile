# Sparta Alignment as a Snakemake workflow: see README.md and the paper.
import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# The sparta package (workflow/sparta) for this process and, through PYTHONPATH, for every
# job's script, whatever environment runs it: a conda env from envs/ holds the dependencies,
# not the package, so no env file names a path and none depends on where Snakemake copies it.
PACKAGE_ROOT = os.path.join(workflow.basedir, "workflow")
sys.path.insert(0, PACKAGE_ROOT)
_PATH_VARIABLE = "PYTHONPATH"  # optional, so not an envvars directive (that requires it set)
_paths = [PACKAGE_ROOT, *filter(None, os.environ.get(_PATH_VARIABLE, "").split(os.pathsep))]
os.environ[_PATH_VARIABLE] = os.pathsep.join(dict.fromkeys(_paths))


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
