"""rule combat: one member answers its duels' prompts, batched, through its chat template."""

import pandas as pd

from sparta import tables
from sparta.generate import SamplingParams, derive_seed, generate
from sparta.logs import setup
from sparta.models import MemberLoader, MemberSpec, chat_text

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
member = sm.wildcards.member
duels = tables.read(sm.input.duels, "duels")
mine = duels[(duels["model_a"] == member) | (duels["model_b"] == member)]
rows = tables.empty("responses")
if len(mine):
    g = sm.params.generation
    loader = MemberLoader(sm.params.device, sm.params.dtype)
    spec = MemberSpec.read(sm.input.member)
    model, tok = loader.load(spec), loader.tokenizer(spec)
    sampling = SamplingParams(g["temperature"], g["top_p"], g["top_k"], g["max_new_tokens"])
    texts = [chat_text(tok, p, sm.params.system) for p in mine["prompt"]]
    seed = derive_seed(sm.params.seed, sm.wildcards.t, sm.wildcards.r, member, "combat")
    outs = generate(model, tok, texts, sampling, seed, g["batch_size"], desc=f"combat {member}")
    rows = pd.DataFrame(
        {
            "duel_id": mine["duel_id"].to_numpy(),
            "model": member,
            "response": [o.text for o in outs],
            "n_tokens": [o.n_tokens for o in outs],
            "finish_reason": [o.finish_reason for o in outs],
        }
    )
    log.info("%s answered %d prompts (%d hit max_new_tokens)", member, len(rows),
             int((rows["finish_reason"] == "length").sum()))  # fmt: skip
else:
    log.info("%s fights in no duel this round", member)
tables.write(rows, sm.output.responses, "responses")
