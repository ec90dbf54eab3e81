"""rule split_prompts: the prompt file split with the seed into alignment, validation, test."""

from sparta import tables
from sparta.data import read_prompt_file, split
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
p = sm.params.prompts
prompts = read_prompt_file(
    sm.input.prompts, p["prompt_column"], p["answer_column"], p["id_column"], p["reference_column"]
)
for name, df in split(prompts, p["validation"], p["test"], sm.params.seed).items():
    tables.write(df, sm.output[name], "prompts")
    log.info("%s: %d prompts", name, len(df))
