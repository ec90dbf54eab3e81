"""DPO with each pair as a tree (the shared prompt once, the LM head on scored positions only)
against TRL's two rows per pair, on the SmolLM2 base; or where a DPO job's time goes:

    python benchmarks/bench_dpo.py [--pairs PREFERENCES.parquet] [--members 2] [--threads 1]
    python benchmarks/bench_dpo.py --breakdown [--device cuda] [--model FOLDER] [--gpu-defaults]

Pairs: a run's preference table (``--pairs``, e.g. results/<run>/iter_1/preferences.parquet),
or ``--count`` made from data/arithmetic.jsonl (chosen: a problem's worked solution; rejected:
the next problem's, so the answers differ from their first token). Each way trains the same
``--members`` fresh LoRA members (same seeds, ``dpo_members`` as a pooled DPO job does), twice,
alternating; the faster of the two is printed. ``--trl-head``: also the tree with TRL's
chunked LM-head kernel (what GPU runs use) instead of the plain fp32 head.

Printed: the CPU, threads, pairs; token positions per pair the model computes (two padded
rows vs the tree) and the LM head scores (every position vs the answers'); seconds of each way
(reference log-probabilities included), the speed-up, and how far the two trainings end apart:
largest difference of a logged loss and of an adapter weight (float rounding of different
but equal sums, growing a little over the steps).

``--breakdown``: one DPO job as the workflow runs it (the tree, ``dpo_members``, ``--device``
with the run's ``dtype: auto``), twice, the faster printed: seconds, ms per optimizer step and
share of the job of, within the steps, the model's forward (TRL's ``compute_loss``: the
policy's forward, its LM head and the loss) and backward (the rest of ``training_step``), data
collation (``get_batch_samples``), the optimizer step, logging and the rest (gradient clipping,
scheduler, callbacks, progress bar); outside them, the training loop's setup and end
(``Trainer.train`` around the steps: a full garbage collection, the optimizer, accelerate's
preparation, the summary), the reference log-probabilities (TRL computes them before the loop)
and the job's setup and saving (base load, adapter, tokenizing). Timers wrap these TRL /
transformers / accelerate methods (:data:`TIMED`) for the job's duration; on a GPU each reading
waits for the device first, so a call is charged its own kernels. ``--gpu-defaults``: without
sparta's GPU options (``train.GPU_SPEED``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_judging import find_judge  # noqa: E402

from sparta import pair_tree  # noqa: E402
from sparta import train as sparta_train  # noqa: E402
from sparta.chat import chat_ids  # noqa: E402
from sparta.members import MemberSpec  # noqa: E402
from sparta.models import load_tokenizer  # noqa: E402
from sparta.settings import DPOSettings, LoraSettings, Runtime  # noqa: E402
from sparta.train import dpo_members  # noqa: E402

SYSTEM = "You are a helpful AI assistant."


def made_pairs(count: int) -> pd.DataFrame:
    rows = pd.read_json(REPO / "data" / "arithmetic.jsonl", lines=True).head(count + 1)
    return pd.DataFrame(
        {
            "prompt": rows["prompt"][:count].tolist(),
            "chosen": rows["solution"][:count].tolist(),
            "rejected": rows["solution"][1 : count + 1].tolist(),
        }
    )


def positions(prefs: pd.DataFrame, tok) -> dict:
    """Per pair: positions of TRL's two rows (padded to the longer), of the tree, scored."""
    rows = tree = scored = sequences = 0
    for p, c, r in zip(prefs["prompt"], prefs["chosen"], prefs["rejected"]):
        prompt = chat_ids(tok, p, SYSTEM)
        full = [
            tok.apply_chat_template(
                [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": p},
                    {"role": "assistant", "content": a},
                ],
                tokenize=True,
                return_dict=False,
            )
            for a in (c, r)
        ]
        shared = next((k for k, (x, y) in enumerate(zip(*full)) if x != y), min(map(len, full)))
        rows += 2 * max(map(len, full))
        tree += len(full[0]) + len(full[1]) - shared
        sequences += sum(min(DPOSettings().max_length, len(f)) for f in full)
        scored += sum(len(f) - len(prompt) for f in full)
    n = len(prefs)
    return {"rows": rows / n, "tree": tree / n, "scored": scored / n, "sequences": sequences / n}


def train(
    base: str, prefs: pd.DataFrame, members: int, folder: Path, device: str = "cpu"
) -> tuple[float, list[dict]]:
    specs = [(MemberSpec(f"m{k}", base), folder / f"m{k}", 100 + k) for k in range(members)]
    sync = synchronizer(device)
    sync()
    start = time.perf_counter()
    out = dpo_members(
        specs, prefs, DPOSettings(), LoraSettings(), Runtime(device=device, system_prompt=SYSTEM)
    )
    sync()
    return time.perf_counter() - start, out


def synchronizer(device: str):
    """What waits for ``device``'s queued work before a clock is read (nothing on a CPU)."""
    kind = torch.device(device).type
    if kind == "cpu":
        return lambda: None
    return getattr(torch, kind).synchronize


# (part, class, method) timed for --breakdown; a part's calls include the parts called inside
# them (compute_loss runs inside training_step); epoch_end marks where the steps end
TIMED = (
    ("data", "transformers:Trainer", "get_batch_samples"),
    ("step", "trl:DPOTrainer", "training_step"),
    ("forward", "trl:DPOTrainer", "compute_loss"),
    ("optimizer", "accelerate.optimizer:AcceleratedOptimizer", "step"),
    ("logging", "trl:DPOTrainer", "log"),
    ("loop", "transformers:Trainer", "train"),
    ("reference", "trl:DPOTrainer", "compute_ref_log_probs"),
    ("epoch_end", "transformers.trainer_callback:CallbackHandler", "on_epoch_end"),
)


@contextmanager
def timed_trainer(device: str):
    """The (start, end) clock readings of every call of :data:`TIMED`'s methods while the block
    runs, per part: each method is wrapped on its class (every trainer sparta builds subclasses
    these) and restored after."""
    import importlib

    sync, calls, saved = synchronizer(device), {p: [] for p, _, _ in TIMED}, []

    def clocked(part, method):
        def call(*args, **kwargs):
            sync()
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                sync()
                calls[part].append((start, time.perf_counter()))

        return call

    for part, where, name in TIMED:
        module, cls_name = where.split(":")
        cls = getattr(importlib.import_module(module), cls_name)
        saved.append((cls, name, cls.__dict__.get(name)))
        setattr(cls, name, clocked(part, getattr(cls, name)))
    try:
        yield calls
    finally:
        for cls, name, own in reversed(saved):
            if own is None:
                delattr(cls, name)
            else:
                setattr(cls, name, own)


def job_parts(took: float, calls: dict) -> dict[str, float]:
    """Seconds of each part of one timed DPO job (:func:`timed_trainer`'s calls). The steps run
    from the first batch fetched to the last epoch's end; per-step parts count their time
    within them, the training loop's setup and end (optimizer, accelerate, the summary log)
    is the rest of ``Trainer.train``."""
    first, last = calls["data"][0][0], calls["epoch_end"][-1][0]

    def within(part):
        return sum(max(0.0, min(e, last) - max(s, first)) for s, e in calls[part])

    def total(part):
        return sum(e - s for s, e in calls[part])

    steps = {
        "model forward": within("forward"),
        "model backward": within("step") - within("forward"),
        "data collation": within("data"),
        "optimizer step": within("optimizer"),
        "logging": within("logging"),
    }
    steps["rest of the steps"] = (last - first) - sum(steps.values())
    return {
        **steps,
        "loop setup and end": total("loop") - (last - first),
        "reference log-probs": total("reference"),
        "job setup and saving": took - total("loop") - total("reference"),
    }


STEP_PARTS = (
    "model forward",
    "model backward",
    "data collation",
    "optimizer step",
    "logging",
    "rest of the steps",
)


def breakdown(base: str, prefs: pd.DataFrame, members: int, device: str) -> None:
    """Run the DPO job twice and print the faster run's parts (see the module's docstring)."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(2):
            with timed_trainer(device) as calls:
                took, out = train(base, prefs, members, Path(tmp) / f"job{k}", device)
            if not (calls["step"] and calls["epoch_end"]):
                sys.exit("no DPO step was timed: the trainer no longer calls the methods in TIMED")
            runs.append((took, job_parts(took, calls), sum(s["steps"] for s in out)))
    took, parts, steps = min(runs, key=lambda r: r[0])
    print(f"{'part':<22}{'s':>8}{'ms/step':>9}{'share':>8}")
    for name, sec in parts.items():
        per_step = f"{1000 * sec / steps:>9.1f}" if name in STEP_PARTS else f"{'':>9}"
        print(f"{name:<22}{sec:>8.3f}{per_step}{100 * sec / took:>7.1f}%")
    print(f"{'job':<22}{took:>8.3f}{'':>9}{100.0:>7.1f}%  ({steps} optimizer steps)")
    model = parts["model forward"] + parts["model backward"]
    in_steps = sum(parts[p] for p in STEP_PARTS)
    print(
        f"model forward + backward: {100 * model / in_steps:.1f}% of the steps' time, "
        f"{100 * model / took:.1f}% of the job"
    )
    # the cost model's train rate: chosen + rejected sequences of every member's pairs per
    # second of the training loops and reference log-probabilities (the job's start-up and
    # saving left out; with several members the timers of the parts overlap, the loops do not)
    tokens = members * len(prefs) * positions(prefs, load_tokenizer(base))["sequences"]
    busy = took - parts["job setup and saving"]
    print(
        f"train rate: {tokens:.0f} tokens (chosen + rejected) in {busy:.2f} s = {tokens / busy:.0f} tokens/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=None, help="a preference table (default: pairs made from the data)")
    ap.add_argument("--count", type=int, default=12, help="pairs made from the data (without --pairs)")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trl-head", action="store_true", help="also the tree with TRL's LM-head kernel")
    ap.add_argument("--model", default=None, help="base model folder, or tiny (default: the SmolLM2 base)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the run's device setting)")
    ap.add_argument("--breakdown", action="store_true", help="where one DPO job's time goes")
    ap.add_argument("--gpu-defaults", action="store_true", help="without sparta's GPU options")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sparta_train.GPU_SPEED = not args.gpu_defaults
    base = find_judge(args.model)
    prefs = pd.read_parquet(args.pairs) if args.pairs else made_pairs(args.count)
    prefs = prefs[["prompt", "chosen", "rejected"]].reset_index(drop=True)
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "no GPU"
    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
        f"device {args.device} ({gpu}), {len(prefs)} pairs x {args.members} members, base {base}"
    )
    if args.breakdown:
        breakdown(base, prefs, args.members, args.device)
    else:
        compare(base, prefs, args)


def compare(base: str, prefs: pd.DataFrame, args) -> None:
    """The tree against TRL's rows (and TRL's head): positions, seconds, how far apart."""
    from safetensors.torch import load_file

    pos = positions(prefs, load_tokenizer(base))
    print(
        f"positions per pair: model {pos['rows']:.1f} (two rows) vs {pos['tree']:.1f} (tree, "
        f"{pos['rows'] / pos['tree']:.2f}x fewer); LM head {pos['rows']:.1f} vs {pos['scored']:.1f} "
        f"({pos['rows'] / pos['scored']:.2f}x fewer)"
    )
    best, results = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        ways = ("rows", "tree", "tree+trl_head") if args.trl_head else ("rows", "tree")
        for k, way in enumerate(ways * 2):  # alternating: drift hits every way
            pair_tree.PAIR_TREE = way != "rows"
            pair_tree.OWN_HEAD = way == "tree"
            took, out = train(base, prefs, args.members, Path(tmp) / f"{way}{k}", args.device)
            best[way] = min(best.get(way, float("inf")), took)
            results[way] = (
                [e["loss"] for s in out for e in s["log_history"] if "loss" in e],
                [load_file(Path(s["adapter"]) / "adapter_model.safetensors") for s in out],
            )
        pair_tree.PAIR_TREE = pair_tree.OWN_HEAD = True
        loss_diff = max(abs(a - b) for a, b in zip(results["rows"][0], results["tree"][0]))
        weight_diff = max(
            (a[key] - b[key]).abs().max().item()
            for a, b in zip(results["rows"][1], results["tree"][1])
            for key in a
        )
    print(f"{'way':<15}{'s':>8}{'s/pair':>9}{'speed-up':>10}")
    for way in ways:
        per_pair = best[way] / (len(prefs) * args.members)
        print(f"{way:<15}{best[way]:>8.1f}{per_pair:>9.2f}{best['rows'] / best[way]:>9.2f}x")
    print(
        f"rows against tree: largest difference of a logged loss {loss_diff:.2e}, "
        f"of an adapter weight {weight_diff:.2e}"
    )


if __name__ == "__main__":
    main()
