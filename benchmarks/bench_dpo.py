"""DPO with each pair as a tree (the shared prompt once, the LM head on scored positions only)
against TRL's two rows per pair, on the SmolLM2 base:

    python benchmarks/bench_dpo.py [--pairs PREFERENCES.parquet] [--members 2] [--threads 1]

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
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "workflow"))

from bench_judging import find_judge  # noqa: E402

from sparta import pair_tree  # noqa: E402
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
    rows = tree = scored = 0
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
        scored += sum(len(f) - len(prompt) for f in full)
    n = len(prefs)
    return {"rows": rows / n, "tree": tree / n, "scored": scored / n}


def train(base: str, prefs: pd.DataFrame, members: int, folder: Path) -> tuple[float, list[dict]]:
    specs = [(MemberSpec(f"m{k}", base), folder / f"m{k}", 100 + k) for k in range(members)]
    start = time.perf_counter()
    out = dpo_members(
        specs, prefs, DPOSettings(), LoraSettings(), Runtime(device="cpu", system_prompt=SYSTEM)
    )
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=None, help="a preference table (default: pairs made from the data)")
    ap.add_argument("--count", type=int, default=12, help="pairs made from the data (without --pairs)")
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trl-head", action="store_true", help="also the tree with TRL's LM-head kernel")
    ap.add_argument("--model", default=None, help="base model folder (default: the SmolLM2 base)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from safetensors.torch import load_file

    base = find_judge(args.model)
    prefs = pd.read_parquet(args.pairs) if args.pairs else made_pairs(args.count)
    prefs = prefs[["prompt", "chosen", "rejected"]].reset_index(drop=True)
    tok = load_tokenizer(base)
    pos = positions(prefs, tok)
    print(
        f"CPU capability {torch.backends.cpu.get_cpu_capability()}, {args.threads} thread(s), "
        f"{len(prefs)} pairs x {args.members} members, base {base}"
    )
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
            took, out = train(base, prefs, args.members, Path(tmp) / f"{way}{k}")
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
