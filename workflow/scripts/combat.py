"""rule combat: each served member answers its duels' prompts, batched, through its chat template."""

import pandas as pd

from sparta import tables
from sparta.generate import SamplingParams, derive_seed
from sparta.jobs import as_list, served_members
from sparta.logs import setup
from sparta.models import chat_text

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
duels = tables.read(sm.input.duels, "duels")
g = sm.params.generation
sampling = SamplingParams(g["temperature"], g["top_p"], g["top_k"], g["max_new_tokens"])
names, specs, engines = served_members(sm)
for member, spec, out in zip(names, specs, as_list(sm.output.responses)):
    mine = duels[(duels["model_a"] == member) | (duels["model_b"] == member)]
    rows = tables.empty("responses")
    if len(mine):
        served = engines(spec)
        texts = [chat_text(served.tok, p, sm.params.system) for p in mine["prompt"]]
        seed = derive_seed(sm.params.seed, sm.wildcards.t, sm.wildcards.r, member, "combat")
        outs = served.generate(texts, sampling, seed, g["batch_size"], desc=f"combat {member}")
        rows = pd.DataFrame(
            {
                "duel_id": mine["duel_id"].to_numpy(),
                "model": member,
                "response": [o.text for o in outs],
                "n_tokens": [o.n_tokens for o in outs],
                "finish_reason": [o.finish_reason for o in outs],
            }
        )
        log.info("%s answered %d prompts (%d hit max_new_tokens, backend %s)", member, len(rows),
                 int((rows["finish_reason"] == "length").sum()), served.backend)  # fmt: skip
    else:
        log.info("%s fights in no duel this round", member)
    tables.write(rows, out, "responses")
