"""rule combat: each served member answers its duels' prompts through its chat template (a
baseline member several times); in a pool job all members' requests run in the same batches."""

import pandas as pd

from sparta import tables
from sparta.chat import chat_ids
from sparta.jobs import as_list, by_base, finish, served_members
from sparta.logs import setup
from sparta.methods import samples_per_prompt
from sparta.seeds import derive_seed
from sparta.settings import job_settings


def main(sm):
    log = setup(sm.log[0], sm.threads)
    job = job_settings(sm)
    gen, t, r = job.generation, sm.wildcards.t, sm.wildcards.r
    n = samples_per_prompt(sm.params.method, job.baselines.samples)
    duels = tables.read(sm.input.duels, "duels")
    specs, backend = served_members(sm, job)
    asked = []  # (member, duel id, prompt, sample) in member order, then play order
    for spec in specs:
        mine = duels[(duels["member_a"] == spec.name) | (duels["member_b"] == spec.name)]
        asked += [(spec, d, p, k) for d, p in zip(mine["duel_id"], mine["prompt"]) for k in range(n)]

    def seed(spec, duel, k):
        # a seed per answer: the same answer whichever job, batch or fan-out asks for it
        parts = (job.runtime.seed, t, r, spec.name, duel, "combat")
        return derive_seed(*parts) if k == 0 else derive_seed(*parts, k)

    outs = [None] * len(asked)
    for group in by_base([a[0] for a in asked]):
        served = backend.serve_each([asked[i][0] for i in group])
        prompts = [chat_ids(served.tok, asked[i][2], job.runtime.system_prompt) for i in group]
        seeds = [seed(asked[i][0], asked[i][1], asked[i][3]) for i in group]
        for i, o in zip(group, served.generate(prompts, gen.sampling, seeds, gen.batch_size, desc="combat")):
            outs[i] = o
    rows = pd.DataFrame(
        {
            "duel_id": [d for _, d, _, _ in asked],
            "member": [spec.name for spec, *_ in asked],
            "sample": [k for *_, k in asked],
            "response": [o.text for o in outs],
            "n_tokens": [o.n_tokens for o in outs],
            "finish_reason": [o.finish_reason for o in outs],
        }
    )
    for spec, out in zip(specs, as_list(sm.output.responses)):
        mine = rows[rows["member"] == spec.name] if len(rows) else tables.empty("responses")
        tables.write(mine, out, "responses")
        cut = int((mine["finish_reason"] == "length").sum())
        log.info("%s answered %d prompts (%d hit max_new_tokens)", spec.name, len(mine), cut)


# vLLM may start its engine in a spawned process, which imports this file again as a module:
# the job runs only in the process Snakemake started (vLLM's rule for a script that starts it)
if __name__ == "__main__":
    main(snakemake)  # noqa: F821
    finish()  # with a vLLM engine: the process ends here (sparta.jobs.finish)
