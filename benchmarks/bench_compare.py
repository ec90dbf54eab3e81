"""Coverage of the comparison's 95% intervals and size of its item-level test with few seeds,
on simulated studies.

    python benchmarks/bench_compare.py [--draws 400] [--items 100] [--replicates 1000] [--seeds 1,2,5]

A simulated study: ``k`` seeds (training runs), each with its own ``--items`` test items.
The method's true effect in run s is delta_s = delta + u_s, u_s ~ N(0, between-seed sd): the
training run itself varies. On an item the paired difference of two 0/1 scores is +1 with
probability (c + delta_s) / 2, -1 with (c - delta_s) / 2, else 0 (c = ``--discordance``, the
share of items the two members disagree on; delta_s is clipped to [-c, c]).

Two questions, two targets:

- *conditional on these training runs*: the mean of the k runs' own delta_s (what these runs
  would score on new test items). The item bootstrap stratified by seed
  (``sparta.significance.paired_bootstrap``, what ``comparison.tsv`` reports) answers it.
- *a new training run*: delta itself (the mean over runs one could train). Only an interval
  over seeds answers it: the seed-level t interval with k - 1 degrees of freedom
  (``sparta.significance.seed_interval``, reported from 5 seeds). The seeds-then-items bootstrap
  the comparison used before is shown for reference: it claims this target and under-covers.

Printed per (seeds, between-seed sd): each interval's coverage of each target over
``--draws`` simulated studies (Monte Carlo standard error about 0.01 at 400 draws) and its
mean width. Then the size of the item-level test (``sparta.significance.paired_test``, the p of
``comparison.tsv``: an exact paired sign-flip test stratified by seed) at no difference
(delta = 0 in every run): the share of studies with p < 0.05, per seeds and discordance
(``--size-discordance``), beside the bootstrap p the comparison used before (no floor,
anti-conservative when few items disagree), each with its Monte Carlo standard error. A
figure, not a timed test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from sparta.significance import _resampled_means, paired_bootstrap, paired_test, seed_interval


def seeds_then_items(
    diffs: list[np.ndarray], replicates: int, rng: np.random.Generator
) -> tuple[float, float]:
    """The comparison's former interval: seeds resampled, then items within each (every seed
    has the same number of items here, so the pooled mean is the mean of the slots' means)."""
    k, n = len(diffs), len(diffs[0])
    # an independent item resample for every (replicate, slot) of every seed
    resampled = np.stack([d[rng.integers(0, n, (replicates * k, n))].mean(axis=1) for d in diffs])
    picked = rng.integers(0, k, (replicates, k))
    slots = np.arange(replicates * k).reshape(replicates, k)
    means = resampled[picked, slots].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def simulate(k: int, sd: float, args, rng: np.random.Generator) -> dict[str, list]:
    c, delta = args.discordance, args.delta
    # delta = E[clip(delta + u)]: the population target under the clipping (Monte Carlo, fixed)
    population = float(np.mean(np.clip(delta + np.random.default_rng(1).normal(0, sd, 2_000_000), -c, c)))
    hits: dict[tuple[str, str], list[bool]] = {}
    widths: dict[str, list[float]] = {}
    for draw in range(args.draws):
        run_effect = np.clip(delta + rng.normal(0, sd, k), -c, c)
        diffs = []
        for d in run_effect:
            u = rng.random(args.items)
            diffs.append(np.where(u < (c + d) / 2, 1.0, np.where(u < c, -1.0, 0.0)))
        conditional = float(run_effect.mean())
        intervals = {
            "item bootstrap, stratified by seed": paired_bootstrap(diffs, args.replicates, seed=draw)[1:3],
            "seeds-then-items bootstrap (former)": seeds_then_items(diffs, args.replicates, rng),
        }
        if k > 1:  # one seed has no interval over seeds
            intervals["seed-level t (k - 1 df)"] = seed_interval([x.mean() for x in diffs])[1:3]
        for name, (low, high) in intervals.items():
            widths.setdefault(name, []).append(high - low)
            hits.setdefault((name, "these runs"), []).append(low <= conditional <= high)
            hits.setdefault((name, "a new run"), []).append(low <= population <= high)
    return {"hits": hits, "widths": widths}


def bootstrap_p(diffs: list[np.ndarray], replicates: int, rng: np.random.Generator) -> float:
    """The comparison's former p: two-sided, the share of stratified bootstrap means on the
    far side of 0 (no floor)."""
    means = np.mean([_resampled_means(d, replicates, rng) for d in diffs], axis=0)
    return float(min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0))))


def size(k: int, c: float, args, rng: np.random.Generator) -> dict[str, float]:
    """Share of simulated studies at no difference (each item +1 or -1 with probability c / 2,
    else 0, in every run) whose p is below 0.05, for each test."""
    rejects = {"exact sign-flip (today)": [], "bootstrap p (former)": []}
    for draw in range(args.draws):
        diffs = []
        for _ in range(k):
            u = rng.random(args.items)
            diffs.append(np.where(u < c / 2, 1.0, np.where(u < c, -1.0, 0.0)))
        rejects["exact sign-flip (today)"].append(paired_test(diffs, args.replicates, seed=draw) < 0.05)
        rejects["bootstrap p (former)"].append(bootstrap_p(diffs, args.replicates, rng) < 0.05)
    return {name: float(np.mean(r)) for name, r in rejects.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=400, help="simulated studies per setting")
    ap.add_argument("--items", type=int, default=100, help="test items per seed")
    ap.add_argument("--replicates", type=int, default=1000, help="bootstrap replicates per interval")
    ap.add_argument("--seeds", default="1,2,5")
    ap.add_argument("--between-seed-sd", default="0,0.1,0.2")
    ap.add_argument("--delta", type=float, default=0.05, help="the method's mean effect")
    ap.add_argument("--discordance", type=float, default=0.5, help="share of items the pair disagrees on")
    ap.add_argument(
        "--size-discordance", default="0.5,0.05", help="discordances of the size table (0.05: 5 of 100 items)"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    print(
        f"coverage of nominal 95% intervals: {args.draws} simulated studies per row, {args.items} test "
        f"items per seed, effect {args.delta}, discordance {args.discordance}"
    )
    print(f"{'seeds':>5} {'sd':>5}  {'interval':<38}{'these runs':>11}{'a new run':>11}{'width':>8}")
    for k in (int(x) for x in args.seeds.split(",")):
        for sd in (float(x) for x in args.between_seed_sd.split(",")):
            out = simulate(k, sd, args, rng)
            for name, width in out["widths"].items():
                cov = [np.mean(out["hits"][(name, target)]) for target in ("these runs", "a new run")]
                print(f"{k:>5} {sd:>5.2f}  {name:<38}{cov[0]:>11.3f}{cov[1]:>11.3f}{np.mean(width):>8.3f}")
        print()
    se = np.sqrt(0.05 * 0.95 / args.draws)
    print(
        f"size at no difference (share of p < 0.05; nominal 0.05, Monte Carlo se {se:.3f}): {args.draws} "
        f"simulated studies per row, {args.items} test items per seed"
    )
    print(f"{'seeds':>5} {'discordance':>12}  {'test':<26}{'size':>7}")
    for k in (int(x) for x in args.seeds.split(",")):
        for c in (float(x) for x in args.size_discordance.split(",")):
            for name, rate in size(k, c, args, rng).items():
                print(f"{k:>5} {c:>12.2f}  {name:<26}{rate:>7.3f}")
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
