"""Throughput of a round's model work on this machine, in the cost model's units, as rows for
``workflow/sparta/rates.csv``: decode (generated tokens/s of combat answers) and read (prompt
tokens/s of expected-mode judging, counted as :mod:`sparta.workload` counts them) on one backend:

    python benchmarks/bench_rates.py --members 'RUN/iter_0/members/*/member.json' [--backend hf]

Runs in one process with the models loaded (a job's start-up is not in a rate; the cost model
leaves it out too), after a warm-up: the members answer ``--prompts`` arithmetic prompts in one
batch (combat's settings: T 0.7, 48 new tokens, the chat template; prefill included), then judge
two answers of each prompt pointwise in expected mode (the default judge). On vLLM (``--backend
vllm``, in ``make vllm-env``'s environment: the CPU build on a machine without a GPU) read
counts the prompt tokens the engine computed (its prefix cache hits left out), as the cost model
does. DPO's rate (a step time): ``benchmarks/bench_dpo.py --breakdown``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

SYSTEM = "You are a helpful AI assistant."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", required=True, help="glob of member.json files (one base)")
    ap.add_argument("--backend", default="hf", choices=("hf", "vllm"))
    ap.add_argument("--prompts", type=int, default=24, help="arithmetic prompts answered and judged")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (hf)")
    ap.add_argument("--size", default="135M", help="the size class of the rows (sparta.cost)")
    ap.add_argument("--commit", default="", help="the commit measured, for the rows' source")
    args = ap.parse_args()

    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from sparta.backends import open_backend
    from sparta.chat import chat_ids
    from sparta.judging import JudgeItem, judge_duels
    from sparta.members import MemberSpec
    from sparta.models import cpu_features
    from sparta.settings import BackendSettings, GenerationSettings, JudgeSettings, Runtime, VLLMSettings

    torch.set_num_threads(args.threads)
    specs = [MemberSpec.read(p) for p in sorted(glob.glob(args.members))]
    if not specs:
        sys.exit(f"no member.json matches {args.members}")
    runtime = Runtime(seed=0, device="cpu", dtype="float32", system_prompt=SYSTEM)
    options = VLLMSettings(gpu_memory_utilization=0.1, enforce_eager=True)
    backend = open_backend(BackendSettings(args.backend, options), runtime, specs)
    rows = [json.loads(line) for line in open(REPO / "data" / "arithmetic.jsonl")][: args.prompts]
    members = [specs[i % len(specs)] for i in range(len(rows))]
    served = backend.serve_each(members)
    prompts = [chat_ids(served.tok, r["prompt"], SYSTEM) for r in rows]
    gen = GenerationSettings(max_new_tokens=48, batch_size=len(prompts))
    backend.serve_each(members[:2]).generate(prompts[:2], gen.sampling, [1, 2], gen.batch_size)  # warm-up

    start = time.perf_counter()
    answers = served.generate(prompts, gen.sampling, list(range(len(prompts))), gen.batch_size)
    decode_s = time.perf_counter() - start
    generated = sum(a.n_tokens for a in answers)

    # each prompt's answer and the next prompt's, judged by the member after the one that answered
    items = [
        JudgeItem(r["prompt"], answers[(i + k) % len(answers)].text)
        for i, r in enumerate(rows)
        for k in (0, 1)
    ]
    judges = [specs[(i + 1) % len(specs)] for i in range(len(rows)) for _ in (0, 1)]
    engine = backend._engine(specs) if args.backend == "vllm" else None
    before = dict(engine.scoring_tokens) if engine else {}
    start = time.perf_counter()
    got = judge_duels(backend.serve_each(judges), items, JudgeSettings(mode="expected"), SYSTEM)
    read_s = time.perf_counter() - start
    if engine:
        read = engine.scoring_tokens["computed"] - before["computed"]
        how = "prompt tokens vLLM computed"
    else:
        read = sum(j.tokens for j in got)
        how = "judged prompts' tokens"
    unusable = sum(j.score is None for j in got)

    cpu = cpu_features()
    bf16 = " (native bf16)" if cpu["native_bf16"] else ""
    threads = f"{args.threads} torch threads" if args.backend == "hf" else "vLLM's CPU build"
    machine = f"{cpu['cores']} cores of an {cpu['model']}, {cpu['capability']}{bf16}, {threads}"
    where = f"{date.today().isoformat()}, commit {args.commit or '?'}: benchmarks/bench_rates.py"
    where += f" --backend {args.backend}"
    decode, read_rate = generated / decode_s, read / read_s
    print(f"machine: {machine}; {len(specs)} members of {specs[0].base}")
    print(f"decode: {generated} tokens of {len(prompts)} answers in {decode_s:.2f} s = {decode:.0f} tokens/s")
    print(f"read: {read} {how} of {len(got)} judgments ({unusable} unusable) in {read_s:.2f} s")
    print(f"      = {read_rate:.0f} tokens/s")
    print("rows for workflow/sparta/rates.csv:")
    head = f"{args.size},{args.backend},CPU"
    print(
        f'decode,{head},{decode:.0f},measured,"{machine}, {where}: {generated} tokens of '
        f'{len(prompts)} combat answers in one batch in {decode_s:.1f} s, prefill included"'
    )
    print(
        f'read,{head},{read_rate:.0f},measured,"{machine}, {where}: {read} {how} of {len(got)} '
        f'expected-mode pointwise judgments in {read_s:.1f} s"'
    )
    if args.backend == "vllm":
        from sparta.jobs import finish

        finish()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    main()
