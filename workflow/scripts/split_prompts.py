"""rule split_prompts: the prompt file split with the seed into alignment, validation, test,
without the prompts too long for the bases' context (sparta/lengths.py)."""

from sparta import lengths, tables
from sparta.config import prompt_budget
from sparta.data import read_prompt_file, split
from sparta.hub import local
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
p = sm.params.prompts
columns = [p[k] for k in ("prompt_column", "answer_column", "id_column", "reference_column")]
shaping = {"where": p.get("where"), "template": p.get("prompt_template"), "answer_map": p.get("answer_map")}
prompts = read_prompt_file(sm.input.prompts, *columns, **shaping)
bound, answer = sm.params.lengths, sm.params.budget.value
budget = prompt_budget([local(b) for b in bound["bases"]], answer["max_new_tokens"])
prompts, skipped = lengths.apply(prompts, budget, answer["system_prompt"], bound["too_long"], "prompts")
if skipped:
    log.warning("%s", skipped)
for name, df in split(prompts, p["validation"], p["test"], sm.params.seed).items():
    tables.write(df, sm.output[name], "prompts")
    log.info("%s: %d prompts", name, len(df))
