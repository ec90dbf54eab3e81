"""rule combat: each served member answers its duels' prompts, batched, through its chat template."""

import pandas as pd

from sparta import tables
from sparta.chat import chat_text
from sparta.jobs import as_list, served_members
from sparta.logs import setup
from sparta.settings import derive_seed, job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
gen = job.generation
duels = tables.read(sm.input.duels, "duels")
specs, backend = served_members(sm, job)
for spec, out in zip(specs, as_list(sm.output.responses)):
    mine = duels[(duels["model_a"] == spec.name) | (duels["model_b"] == spec.name)]
    rows = tables.empty("responses")
    if len(mine):
        served = backend.serve(spec)
        texts = [chat_text(served.tok, p, job.runtime.system_prompt) for p in mine["prompt"]]
        seed = derive_seed(job.runtime.seed, sm.wildcards.t, sm.wildcards.r, spec.name, "combat")
        outs = served.generate(texts, gen.sampling, seed, gen.batch_size, desc=f"combat {spec.name}")
        rows = pd.DataFrame(
            {
                "duel_id": mine["duel_id"].to_numpy(),
                "model": spec.name,
                "response": [o.text for o in outs],
                "n_tokens": [o.n_tokens for o in outs],
                "finish_reason": [o.finish_reason for o in outs],
            }
        )
        cut = int((rows["finish_reason"] == "length").sum())
        log.info("%s answered %d prompts (%d hit max_new_tokens)", spec.name, len(rows), cut)
    else:
        log.info("%s fights in no duel this round", spec.name)
    tables.write(rows, out, "responses")
