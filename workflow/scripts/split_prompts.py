"""rule split_prompts."""

from sparta import tables
from sparta.data import read_prompt_file, split
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
p = sm.params.prompts
prompts = read_prompt_file(sm.input[0], p["prompt_column"], p.get("answer_column"), p.get("id_column"))
parts = split(prompts, p["validation"], p["test"], sm.params.seed)
for name, df in parts.items():
    tables.write(df, sm.output[name], "prompts")
    log.info("%s: %d prompts", name, len(df))
