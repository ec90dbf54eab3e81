"""The statistics of a study's comparison (pure): paired per-item differences in; intervals
(item bootstrap stratified by seed, seed-level t), exact paired p-values, Holm's adjustment and
minimum detectable differences out."""

from __future__ import annotations

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8


def _resampled_means(d: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``replicates`` resamples (with replacement) of ``d``, drawn in blocks."""
    out = np.empty(replicates)
    step = max(1, 2_000_000 // len(d))
    for start in range(0, replicates, step):
        k = min(step, replicates - start)
        out[start : start + k] = d[rng.integers(0, len(d), (k, len(d)))].mean(axis=1)
    return out


def paired_bootstrap(
    diffs_by_seed: list[np.ndarray], replicates: int = 10_000, seed: int = 0
) -> tuple[float, float, float, float]:
    """(mean difference, 95% interval low, high, two-sided p) of paired per-item differences
    (one array per seed): items resampled within each seed, the seeds kept (conditional on these
    training runs); the difference is the mean of the seeds' mean differences. The p is
    :func:`paired_test`'s: a bootstrap p has no floor and is anti-conservative when few items
    disagree."""
    rng = np.random.default_rng(seed)
    diffs_by_seed = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d)]
    if not diffs_by_seed:
        return (float("nan"),) * 4
    observed = float(np.mean([d.mean() for d in diffs_by_seed]))
    means = sum(_resampled_means(d, replicates, rng) for d in diffs_by_seed) / len(diffs_by_seed)
    low, high = np.percentile(means, [2.5, 97.5])
    return observed, float(low), float(high), paired_test(diffs_by_seed, replicates, seed)


EXACT_POINTS = 1_000_000
"""The largest exact sign-flip distribution :func:`paired_test` computes (points before equal
sums merge: the product over groups of equal weighted differences of the group's size + 1);
above it the p is a Monte Carlo one."""


def paired_test(diffs_by_seed: list[np.ndarray], replicates: int = 10_000, seed: int = 0) -> float:
    """Two-sided p of "no difference in these training runs": a paired sign-flip test
    stratified by seed (each nonzero difference is +|d| or -|d| with probability 1/2, the seeds
    kept; the statistic is the mean of the seeds' mean differences). Exact at any count (three
    items all +1: p = 0.25; 4 of 20 discordant, all one way: 0.125, where the bootstrap gives an
    anti-conservative 0.022), never 0. For 0/1 scores with equal test sizes it is McNemar's
    exact test on the discordant items pooled over seeds; other scores convolve one binomial
    per group of equal weighted differences (in integer steps, ties included) while that stays
    below :data:`EXACT_POINTS` points, else ``replicates`` random flips give
    (1 + the flips as extreme) / (replicates + 1). No nonzero difference: p = 1."""
    diffs = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d)]
    if not diffs:
        return float("nan")
    k = len(diffs)
    weighted = np.concatenate([d[d != 0] / (k * len(d)) for d in diffs])
    if len(weighted) == 0:
        return 1.0
    # the magnitudes on an integer grid, 2^50 / n steps to the largest (every sum of n of them
    # is an integer below 2^53, exact in floats in any order); rounding moves a sum by under
    # half a step per item, so sums within n + 1 steps are one sum of the scores, as extreme
    grid = np.abs(weighted) / np.abs(weighted).max()
    grid = np.rint(grid * 2.0 ** (50 - len(grid).bit_length()))
    observed, tol = abs(float(np.sign(weighted) @ grid)), len(grid) + 1.0
    if observed <= tol:
        return 1.0
    values, counts = np.unique(grid, return_counts=True)
    if float(np.prod(counts + 1.0)) <= EXACT_POINTS:
        support, prob = np.zeros(1), np.ones(1)
        for m, n in zip(values, counts):
            b = np.arange(n + 1)
            support, inverse = np.unique((support[:, None] + m * (2 * b - n)).ravel(), return_inverse=True)
            prob = np.bincount(inverse, (prob[:, None] * stats.binom.pmf(b, n, 0.5)).ravel())
        return float(min(1.0, prob[np.abs(support) >= observed - tol].sum()))
    rng = np.random.default_rng(seed)
    extreme, step = 0, max(1, 2_000_000 // len(grid))
    for start in range(0, replicates, step):
        signs = rng.integers(0, 2, (min(step, replicates - start), len(grid))) * 2 - 1
        extreme += int((np.abs(signs @ grid) >= observed - tol).sum())
    return (1 + extreme) / (replicates + 1)


def seed_interval(
    per_seed: list[float] | np.ndarray, alpha: float = ALPHA
) -> tuple[float, float, float, float]:
    """(mean, low, high, two-sided p) of a t interval over per-seed differences, with n - 1
    degrees of freedom: the question "what would another training run give".

    The p is never 0. Every seed's difference the same has no variance to build a t statistic
    from: mean 0 gives p = 1; a nonzero mean gives the exact sign test over the seeds
    (2 x 0.5^n when all n agree in sign: 0.0625 for 5 seeds), the smallest p that n training
    runs can give without a variance, not the t test's 0 (an infinite t from a variance that
    is 0 only because 0/1 scores of few items repeat); the interval is then the point."""
    x = np.asarray(per_seed, dtype=float)
    if len(x) < 2:
        return (float("nan"),) * 4
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))
    if se == 0:
        if mean == 0:
            return mean, mean, mean, 1.0
        nonzero = int((x != 0).sum())
        return mean, mean, mean, float(stats.binomtest(int((x > 0).sum()), nonzero, 0.5).pvalue)
    q = float(stats.t.ppf(1 - alpha / 2, len(x) - 1))
    p = float(2 * stats.t.sf(abs(mean) / se, len(x) - 1))
    return mean, mean - q * se, mean + q * se, p


def minimum_detectable_difference(
    diffs_by_seed: list[np.ndarray], alpha: float = ALPHA, power: float = POWER
) -> float:
    """The smallest true mean difference a paired two-sided test at ``alpha`` detects with
    ``power``, for this design (these seeds, these items per seed): (z_{1-alpha/2} +
    z_power) x the standard error of the stratified mean difference, sum_s var_s / n_s / k^2,
    from the observed variance of each seed's paired differences (for 0/1 scores that is the
    share of discordant items minus the squared mean difference). It answers "how large a
    difference in these training runs can these test items show"; pass ``alpha`` / the
    family size for Holm's first step (:func:`holm_mde`)."""
    diffs = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d) > 1]
    if not diffs:
        return float("nan")
    var = sum(float(np.var(d, ddof=1)) / len(d) for d in diffs) / len(diffs) ** 2
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    return z * float(np.sqrt(var))


def holm_mde(mde: float, family: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """An item-level MDE (at ``alpha``) rescaled to Holm's first-step threshold, ``alpha`` /
    ``family``: the standard error it was made of times z_{1-alpha/(2m)} + z_power."""
    if family < 1 or mde is None or np.isnan(mde):
        return float("nan")
    z = stats.norm.ppf(power)
    return float(mde * (stats.norm.ppf(1 - alpha / (2 * family)) + z) / (stats.norm.ppf(1 - alpha / 2) + z))


def seed_minimum_detectable_difference(
    per_seed: list[float] | np.ndarray, alpha: float = ALPHA, power: float = POWER
) -> float:
    """The smallest mean difference over training runs that the seed-level two-sided t test
    (n - 1 degrees of freedom, at ``alpha``) detects with ``power`` with these n seeds, from
    the variance between the seeds' differences (the noncentral t's power, solved for the
    difference): the question "would a new training run show it". NaN below 2 seeds or when
    the seeds' differences do not vary (no variance to plan with)."""
    x = np.asarray(per_seed, dtype=float)
    n = len(x)
    sd = float(x.std(ddof=1)) if n > 1 else 0.0
    if n < 2 or sd == 0:
        return float("nan")
    df = n - 1
    crit = float(stats.t.ppf(1 - alpha / 2, df))

    def shortfall(delta: float) -> float:
        nc = delta * np.sqrt(n) / sd
        # scipy's noncentral t gives NaN far in a tail, where the probability is about 0
        upper = float(np.nan_to_num(stats.nct.sf(crit, df, nc), nan=1.0 if nc > crit else 0.0))
        lower = float(np.nan_to_num(stats.nct.cdf(-crit, df, nc), nan=0.0))
        return upper + lower - power

    high = sd
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10 * sd))


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN and is not counted in the family):
    the i-th smallest of m is max over j <= i of min(1, (m - j + 1) p_(j))."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    m, running = len(finite), 0.0
    for rank, i in enumerate(finite[np.argsort(p[finite], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out
