"""rule pair_accuracy: did the members learn the pool's preferences? Each member before and
after its DPO of iteration t, on the pairs of iteration t + 1 (which it never trained on)."""

import pandas as pd

from sparta import tables
from sparta.backends import open_backend
from sparta.chat import chat_ids
from sparta.evaluate import option_requests
from sparta.jobs import by_base, finish
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.metrics import wilson_interval
from sparta.settings import job_settings
from sparta.train import pairs_of


def main(sm):
    log = setup(sm.log[0], sm.threads)
    job = job_settings(sm)
    t, system = int(sm.wildcards.t), job.runtime.system_prompt
    pairs = tables.read(sm.input.pairs, "preferences")
    checkpoints = {"before": (t - 1, sm.input.before), "after": (t, sm.input.after)}
    # the two checkpoints of a member are different adapters: name them apart for the backend
    specs = []
    for when, (ckpt, paths) in checkpoints.items():
        for path in paths:
            spec = MemberSpec.read(path)
            specs.append((when, ckpt, spec.name, MemberSpec(f"{spec.name}@{ckpt}", spec.base, spec.adapter)))
    backend = open_backend(job.backend, job.runtime, [s for *_, s in specs])
    rows = []
    for group in by_base([s for *_, s in specs]):
        tok = backend.serve(specs[group[0]][3]).tok

        def with_answer(text, prompt, tok=tok):
            return chat_ids(tok, prompt, system, text)

        asked, prompts, conts = [], [], []
        for i in group:  # a member's held-out pairs: all (Sparta) or its own (a baseline)
            for p in pairs_of(pairs, specs[i][2]).itertuples(index=False):
                for answer in (p.chosen, p.rejected):
                    ids, cont = option_requests(lambda x, q=p.prompt: with_answer(x, q), [answer])
                    asked.append(i)
                    prompts += ids
                    conts += cont
        logps = (
            backend.serve_each([specs[i][3] for i in asked]).continuation_logprobs(
                prompts, conts, job.evaluation.batch_size
            )
            if asked
            else []
        )
        per_token = pd.DataFrame(
            {"i": asked, "lp": [row[0] / max(1, len(c[0])) for row, c in zip(logps, conts)]}
        )
        for i in group:
            when, ckpt, name, _ = specs[i]
            lp = per_token.loc[per_token["i"] == i, "lp"].to_numpy()
            margin = lp[0::2] - lp[1::2]  # chosen minus rejected, per pair
            agree = int((margin > 0).sum())
            low, high = wilson_interval(agree, len(margin))
            rows.append(
                {
                    "iteration": t,
                    "member": name,
                    "when": when,
                    "checkpoint": ckpt,
                    "pairs": len(margin),
                    "agree": agree,
                    "accuracy": agree / len(margin) if len(margin) else float("nan"),
                    "accuracy_low": low,
                    "accuracy_high": high,
                    "mean_margin": float(margin.mean()) if len(margin) else float("nan"),
                }
            )
    table = pd.DataFrame(rows, columns=tables.columns("pair_accuracy"))
    tables.write(table, sm.output.accuracy, "pair_accuracy")
    log.info("held-out pairs of iteration %d (%d):\n%s", t + 1, len(pairs), table.to_string(index=False))


# vLLM may start its engine in a spawned process, which imports this file again as a module:
# the job runs only in the process Snakemake started (vLLM's rule for a script that starts it)
if __name__ == "__main__":
    main(snakemake)  # noqa: F821
    finish()  # with a vLLM engine: the process ends here (sparta.jobs.finish)
