"""Where an evaluation job's time goes: greedy answers to the arithmetic task, as
``sparta/evaluate.py`` asks for them (chat template, prompts sorted by length, one batch):

    python benchmarks/bench_generate.py [--prompts 48] [--threads 1] [--model MODEL]

Printed, all from one process (the machine's speed cancels out of the ratios):

- CPU features and threads;
- the prompt tokens, with padding, and how many of them every prompt shares (the system prompt
  and the template's markup: what a prefix cache would compute once);
- prefill alone (``max_new_tokens=1``) against the whole answer (the task's 32 tokens), so the
  prompt's share of the time shows, and the time per decoding step;
- the answers' lengths (mean, median, how many stop at the limit): what dropping finished rows
  from a batch (the backend's own decoding, ``hf.OWN_DECODING``) can save at most;
- whole answers decoded three ways, alternated twice: transformers' ``generate`` with its
  DynamicCache (every layer's whole cache concatenated at every step, every row computed to
  the batch's end), ``generate`` with the backend's roomy cache (``hf.ROOMY_CACHE``), and the
  backend's own decoding (finished rows leave the batch): seconds, speed-up, same answers;
- whole answers with the prompts' shared start computed once (``hf.SHARE_PROMPTS``, as the
  backend generates) against every row's prompt computed in full with left padding,
  alternated twice: the speed-up and how many answers are the same;
- the same batch with 4 LoRA adapters mixed row by row (PEFT's ``adapter_names``, as an
  evaluation job of 4 members serves them) against one adapter on every row, alternated three
  times: the cost of mixing members in one batch. The adapters are random, of sparta's default
  LoRA settings, which is all a timing needs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_judging import find_judge  # noqa: E402

from sparta.backends import hf  # noqa: E402
from sparta.chat import chat_ids, stop_token_ids  # noqa: E402
from sparta.models import cpu_features, load_tokenizer  # noqa: E402
from sparta.settings import LoraSettings, Sampling  # noqa: E402
from sparta.train import lora_config  # noqa: E402

SYSTEM = "You are a helpful AI assistant."


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def with_random_adapters(model, n: int):
    """``model`` with ``n`` LoRA adapters of sparta's default LoRA settings (random B: B starts
    at 0, and each adapter must change the model), in memory: (the PEFT model, their names)."""
    from peft import get_peft_model

    cfg = lora_config(LoraSettings())
    names = [f"m{i}" for i in range(n)]
    model = get_peft_model(model, cfg, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, cfg)
    torch.manual_seed(0)
    for key, p in model.named_parameters():
        if "lora_B" in key:
            torch.nn.init.normal_(p, std=0.02)
    return model.eval(), names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=48, help="arithmetic prompts (one batch)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=32, help="the arithmetic task's limit")
    ap.add_argument("--model", help="model folder (default: the converted SmolLM2 base)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, GenerationConfig

    base = find_judge(args.model)
    tok = load_tokenizer(base)
    rows = pd.read_json(REPO / "data" / "arithmetic.jsonl", lines=True).head(args.prompts)
    prompts = [chat_ids(tok, p, SYSTEM) for p in rows.prompt]
    n = len(prompts)
    print(f"cpu: {cpu_features()}, threads {args.threads}, prompts {n} (one batch), model {base}")

    plain = AutoModelForCausalLM.from_pretrained(base).eval()
    full = Sampling.greedy_decoding(args.max_new_tokens)
    one = Sampling.greedy_decoding(1)
    seeds = [0] * n
    hf.generate(plain, tok, prompts[:2], one, [0, 0], batch_size=2)  # warm up
    hf.SHARE_PROMPTS = False  # prefill as a whole: the prompt's full cost
    t_pre, _ = timed(lambda: hf.generate(plain, tok, prompts, one, seeds, batch_size=n))
    t_all, outs = timed(lambda: hf.generate(plain, tok, prompts, full, seeds, batch_size=n))
    hf.SHARE_PROMPTS = True
    stops = stop_token_ids(tok)
    lengths = sorted(o.n_tokens + (o.finish_reason == "stop") for o in outs)  # with the stop token
    at_max = sum(o.finish_reason == "length" for o in outs)
    mean = statistics.mean(lengths)
    tokens = sum(len(p) for p in prompts)
    shared = 0
    while all(len(p) > shared and p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    print(
        f"prompt tokens {tokens} (longest {max(map(len, prompts))}, {n * max(map(len, prompts))} with "
        f"padding); the first {shared} tokens of every prompt are the same (system prompt and "
        f"template): {shared * n / tokens:.0%} of the prompt tokens; stop tokens {stops}"
    )
    print(
        f"prefill only {t_pre:.2f} s, whole answers ({args.max_new_tokens} tokens at most) "
        f"{t_all:.2f} s: prefill {t_pre / t_all:.0%} of it, "
        f"{(t_all - t_pre) / max(args.max_new_tokens - 1, 1):.3f} s per decoding step of the batch"
    )
    print(
        f"answer tokens: mean {mean:.1f}, median {statistics.median(lengths):.0f}"
        + f", {at_max} of {n} stopped by the limit"
        + f"; dropping finished rows saves at most {1 - mean / args.max_new_tokens:.0%}"
        " of the decoding steps' rows"
    )

    ways = {
        "generate, DynamicCache": {"OWN_DECODING": False, "ROOMY_CACHE": False},
        "generate, roomy cache": {"OWN_DECODING": False, "ROOMY_CACHE": True},
        "own decoding, roomy cache": {"OWN_DECODING": True, "ROOMY_CACHE": True},
    }
    best: dict[str, float] = {}
    answers: dict[str, list[str]] = {}
    for name in list(ways) * 2:
        for flag, value in ways[name].items():
            setattr(hf, flag, value)
        took, got = timed(lambda: hf.generate(plain, tok, prompts, full, seeds, batch_size=n))
        best[name] = min(best.get(name, float("inf")), took)
        answers[name] = [o.text for o in got]
    hf.OWN_DECODING = hf.ROOMY_CACHE = True
    first = next(iter(ways))
    for name in ways:
        same = sum(a == b for a, b in zip(answers[name], answers[first]))
        print(
            f"whole answers, {name}: {best[name]:.2f} s, {best[first] / best[name]:.2f}x "
            f"(best of 2); {same} of {n} answers as {first}"
        )

    shared_runs: dict[bool, list[float]] = {True: [], False: []}
    texts: dict[bool, list[str]] = {}
    for share in (True, False) * 2:
        hf.SHARE_PROMPTS = share
        took, got = timed(lambda: hf.generate(plain, tok, prompts, full, seeds, batch_size=n))
        shared_runs[share].append(took)
        texts[share] = [o.text for o in got]
    hf.SHARE_PROMPTS = True
    same = sum(a == b for a, b in zip(texts[True], texts[False]))
    once, full_rows = (" ".join(f"{t:.2f}" for t in shared_runs[k]) for k in (True, False))
    speedup = min(shared_runs[False]) / min(shared_runs[True])
    print(
        f"whole answers, the shared start computed once: {once} s, every prompt in full: "
        f"{full_rows} s: {speedup:.2f}x (best of 2 each); {same} of {n} answers the same"
    )

    model, names = with_random_adapters(plain, 4)  # plain's own timings are done
    # every row runs 16 steps (no stop token ends one early), so both batches do the same work
    forced = GenerationConfig(
        do_sample=False, max_new_tokens=16, min_new_tokens=16, pad_token_id=tok.pad_token_id
    )
    enc = hf._left_padded(prompts, tok.pad_token_id)

    def run(who):
        with torch.no_grad():
            return timed(lambda: model.generate(**enc, generation_config=forced, adapter_names=who))[0]

    mixed = [names[i % 4] for i in range(n)]
    single = [names[0]] * n
    times: dict[str, list[float]] = {"4 adapters mixed": [], "1 adapter": []}
    run(single)  # warm up
    for _ in range(3):
        for label, who in (("4 adapters mixed", mixed), ("1 adapter", single)):
            times[label].append(run(who))
    for label, ts in times.items():
        print(f"{label}: {' '.join(f'{t:.2f}' for t in ts)} s (16 tokens at most), best {min(ts):.2f} s")
    ratio = min(times["4 adapters mixed"]) / min(times["1 adapter"])
    print(f"mixing 4 members in a batch costs {ratio:.2f}x one member's batch (best of 3 each)")


if __name__ == "__main__":
    main()
