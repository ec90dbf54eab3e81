"""Prompt tokens vLLM computes per judged text, for every expected-score format the methods
use, scored through the candidates' shared prefixes (one prefill per prompt) and, for
comparison, one prompt-scoring request per candidate (``TREE_SCORING = False``), with the
largest difference between the two paths' scores.

    python benchmarks/bench_vllm_scoring.py --members 'results/default-small/iter_0/members/*/member.json'

Runs where vLLM is installed (``make vllm-env``: the CPU build on any machine), under the
``__main__`` guard vLLM's spawned engine needs. The members: member.json files of a finished
run (``.test/config.yaml``'s pool at test size, say). Counts come from vLLM's per-request
``num_cached_tokens``; ``once`` is each scored prompt's length counted once (what one prefill
per prompt computes), so ``computed / once`` is the prefill per judged text in prompts; ``cost
model``: what :func:`sparta.workload.vllm_scoring` counts for those prompts at the engine's KV
block. The prefix cache is emptied before each path.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

ANSWERS = ["The answer is 12.", "I think it is 7, because 3 + 4 = 7.", "42", "Let me see... 15."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", required=True, help="glob of member.json files (one base)")
    ap.add_argument("--prompts", type=int, default=8, help="arithmetic prompts judged")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    from sparta.backends import open_backend
    from sparta.backends import vllm as vllm_backend
    from sparta.judging import ADDITIVE_RUBRIC, SPARTA_RUBRIC, JudgeItem, judge_duels, meta_judge
    from sparta.members import MemberSpec
    from sparta.settings import BackendSettings, JudgeSettings, Runtime, VLLMSettings
    from sparta.workload import SCORED_PREFIXES, vllm_scoring

    specs = [MemberSpec.read(p) for p in sorted(glob.glob(args.members))]
    runtime = Runtime(seed=0, device="cpu", dtype="float32", system_prompt="You are a helpful AI assistant.")
    options = VLLMSettings(gpu_memory_utilization=0.1, enforce_eager=True)
    backend = open_backend(BackendSettings("vllm", options), runtime, specs)
    prompts = [json.loads(line)["prompt"] for line in open(REPO / "data" / "arithmetic.jsonl")][
        : args.prompts
    ]
    items = [JudgeItem(p, ANSWERS[(i + k) % 4]) for i, p in enumerate(prompts) for k in (0, 1)]
    judges = [specs[i % len(specs)] for i in range(len(items) // 2) for _ in (0, 1)]
    base = JudgeSettings(mode="expected")
    template = {"pointwise (Sparta)": "sparta", "pairwise (Sparta, SPPO's annotator)": "pairwise"}
    template |= {"additive rubric (self-rewarding)": "additive", "meta-judge (meta-rewarding)": "meta"}
    cases = {
        "pointwise (Sparta)": (dataclasses.replace(base, format="pointwise"), SPARTA_RUBRIC),
        "pairwise (Sparta, SPPO's annotator)": (dataclasses.replace(base, format="pairwise"), SPARTA_RUBRIC),
        "additive rubric (self-rewarding)": (dataclasses.replace(base, format="pointwise"), ADDITIVE_RUBRIC),
        "meta-judge (meta-rewarding)": None,
    }
    engine = backend._engine(specs)
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    scored = engine.continuation_logprobs
    lengths: list[int] = []  # each distinct scored prompt's length, as the cost model reads it

    def counted(members, prompts, conts):
        lengths.extend(len(ids) for _, ids in {(m.adapter, tuple(p)) for m, p in zip(members, prompts)})
        return scored(members, prompts, conts)

    engine.continuation_logprobs = counted
    rows = []
    for name, case in cases.items():
        scores = {}
        for tree in (True, False):
            vllm_backend.TREE_SCORING = tree
            engine.llm.reset_prefix_cache()  # each path from an empty cache
            before = dict(engine.scoring_tokens)
            lengths.clear()
            if case is None:
                users = [f"Rate this answer to {p!r}." for p in prompts]
                pairs = [("Score: 3. It is right.", "Score: 1. It is wrong.")] * len(prompts)
                got = meta_judge(backend.serve(specs[0]), users, pairs, base, runtime.system_prompt)
                scores[tree] = np.array([x[0] for x in got])
            else:
                cfg, rubric = case
                got = judge_duels(backend.serve_each(judges), items, cfg, runtime.system_prompt, None, rubric)
                scores[tree] = np.array([x.score for x in got])
            done = {k: engine.scoring_tokens[k] - before[k] for k in before}
            rows.append(
                {
                    "format": name,
                    "path": "shared prefixes" if tree else "a request per candidate",
                    "requests": done["requests"],
                    "prompt tokens sent": done["prompt"],
                    "computed": done["computed"],
                    "computed / once": round(done["computed"] / max(1, done["once"]), 3),
                    "cost model": sum(
                        vllm_scoring(n, SCORED_PREFIXES[template[name]], block) for n in lengths
                    )
                    if tree
                    else "",
                }
            )
        diff = float(np.nanmax(np.abs(scores[True] - scores[False])))
        rows[-2]["max |score diff|"] = f"{diff:.1e}"
    table = pd.DataFrame(rows)
    print(f"torch cpu capability: {torch.backends.cpu.get_cpu_capability()}; vLLM's KV block {block}")
    print(table.to_string(index=False))
    if args.json:
        table.to_json(args.json, orient="records", indent=1)
    from sparta.jobs import finish

    finish()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    main()
