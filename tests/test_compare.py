"""The study comparison's statistics on synthetic score tables whose right answer is known:
Holm-Bonferroni, the item bootstrap stratified by seed, each seed's own difference, the
seed-level interval, the minimum detectable difference, best init per run (a pool-size
experiment listed first or last gives the same table), checkpoint selection from every
checkpoint or the final ones; and what a study shares per seed."""

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from sparta import compare, significance, tables
from sparta.settings import SettingsError
from sparta.study import expand

from .workflow_helpers import tiny_config

TASK = "t"


def evaluation(member: str, checkpoint: int, val: list[float], test: list[float]) -> pd.DataFrame:
    """One member at one checkpoint: validation items v0.., test items i0.."""
    rows = [("validation", f"v{k}", x) for k, x in enumerate(val)] + [
        ("test", f"i{k}", x) for k, x in enumerate(test)
    ]
    return pd.DataFrame(
        [
            {
                "task": TASK,
                "member": member,
                "checkpoint": checkpoint,
                "split": s,
                "example_id": e,
                "score": x,
            }
            for s, e, x in rows
        ]
    )


def ones(k: int, n: int = 10) -> list[float]:
    """n scores, the first k right."""
    return [float(i < k) for i in range(n)]


def by_name(table: pd.DataFrame) -> pd.DataFrame:
    return table.set_index("experiment")


# --- Holm-Bonferroni -------------------------------------------------------------------------


def test_holm_by_hand():
    """p = 0.01, 0.04, 0.03, 0.005: sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06,
    0.04 x 1 = 0.04 -> 0.06 (monotone); NaN stays out of the family."""
    adjusted = significance.holm([0.01, 0.04, np.nan, 0.03, 0.005])
    assert adjusted[[0, 1, 3, 4]] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert np.isnan(adjusted[2])
    assert significance.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1


def test_the_star_marks_the_holm_adjusted_p_only():
    """Seed 1, 20 test items. Best init right on none; Sparta's member right on 4 of them;
    SPIN's member is best init's twin. Family: sparta vs best init, spin vs best init, spin vs
    sparta (best init vs sparta is sparta vs best init again): 3. Sparta vs best init: 4 of 20
    items discordant, all one way: the exact sign test gives p = 2 x 0.5^4 = 0.125 (the
    bootstrap said 2 x 0.8^20 = 0.023, anti-conservative), and so has spin vs sparta (the
    mirror differences); Holm multiplies the smallest by 3: 0.375, no star."""
    n = 20
    initial = evaluation("a", 0, ones(5, n), ones(0, n))
    runs = pd.DataFrame(
        {"run": ["s/sparta-seed1", "s/spin-seed1"], "experiment": ["sparta", "spin"], "seed": [1, 1]}
    )
    evaluations = {
        "s/sparta-seed1": evaluation("a", 1, ones(9, n), ones(4, n)),
        "s/spin-seed1": evaluation("a", 1, ones(9, n), ones(0, n)),
    }
    table = compare.comparison(runs, evaluations, None, {1: initial}, 20_000)
    t = by_name(table)
    p = t.loc["sparta", "vs_best_init_p"]
    assert p == pytest.approx(0.125, abs=1e-12)
    assert t.loc["spin", "vs_sparta_p"] == p  # mirror differences, the same test
    assert (table["family_size"] == 3).all()
    assert t.loc["sparta", "vs_best_init_p_holm"] == pytest.approx(3 * p)
    assert t.loc["spin", "vs_sparta_p_holm"] == pytest.approx(3 * p)
    assert t.loc["spin", "vs_best_init_p_holm"] == 1.0  # identical answers: p = 1
    assert t.loc["best init", "vs_sparta_p_holm"] == t.loc["sparta", "vs_best_init_p_holm"]
    assert not table["vs_best_init_significant"].any() and not table["vs_sparta_significant"].any()
    text = compare.format_table(table)
    assert "*" not in text.split("brackets")[0]  # no star in the table itself
    assert "Holm family: 3 comparisons" in text
    assert "not Holm-adjusted (only the p behind * is)" in text  # the brackets are not adjusted
    # a clear effect stays significant after the adjustment
    evaluations["s/sparta-seed1"] = evaluation("a", 1, ones(9, n), ones(12, n))
    t = by_name(compare.comparison(runs, evaluations, None, {1: initial}, 5_000))
    assert t.loc["sparta", "vs_best_init_significant"] and t.loc["sparta", "vs_best_init_p_holm"] < 0.05
    assert "*" in compare.format_table(t.reset_index()).split("brackets")[0]


# --- the bootstrap, per seed and over seeds --------------------------------------------------


def test_bootstrap_is_stratified_by_seed():
    """Seed 1 gains 1 on every item, seed 2 loses 1 on every item: resampling items within
    each seed never changes either seed's mean, so the conditional interval is [0, 0] (a
    seeds-then-items bootstrap would reach -1 and +1)."""
    assert significance.paired_bootstrap([np.ones(8), -np.ones(8)], replicates=2_000)[:3] == (0.0, 0.0, 0.0)
    # seed 1: differences 0 and 1 (mean 0, 0.5 or 1 with probability 1/4, 1/2, 1/4); seed 2: 0
    d, low, high, p = significance.paired_bootstrap([np.array([0.0, 1.0]), np.zeros(3)], replicates=40_000)
    assert (d, low, high) == (0.25, 0.0, 0.5)
    assert p == 1.0  # the exact test: one discordant item, either sign as extreme


def test_the_item_level_p_is_exact_at_small_counts():
    """The paired sign-flip test stratified by seed, by hand. Three items all +1: 2 of the 8
    sign patterns are as extreme, p = 0.25 (the bootstrap's was 0: no resample crosses 0).
    4 of 20 items discordant, all one way: p = 2 x 0.5^4 = 0.125 (the bootstrap's 0.022).
    Nothing discordant: p = 1. Two seeds of equal size pool into McNemar's exact test (the
    binomial on the 30 discordant items, 20 one way). Unequal sizes: seed 1 two items +1 of 2
    (weight 1/4 each), seed 2 one +1 of 4 (weight 1/8): T = 5/8, as extreme only when all
    three signs agree: p = 2/8. Forty distinct continuous differences all positive: the Monte
    Carlo path, p at its floor 1/(B + 1), never 0."""
    assert significance.paired_test([np.ones(3)]) == pytest.approx(0.25)
    assert significance.paired_bootstrap([np.ones(3)])[1:] == (1.0, 1.0, pytest.approx(0.25))
    four = np.array([1.0] * 4 + [0.0] * 16)
    assert significance.paired_test([four]) == pytest.approx(0.125)
    assert significance.paired_test([-four]) == pytest.approx(0.125)
    assert significance.paired_test([np.zeros(20)]) == 1.0
    assert significance.paired_test([np.array([1.0, -1.0, 0.0])]) == 1.0
    seed1 = np.array([1.0] * 12 + [-1.0] * 3 + [0.0] * 25)
    seed2 = np.array([1.0] * 8 + [-1.0] * 7 + [0.0] * 25)
    assert significance.paired_test([seed1, seed2]) == pytest.approx(stats.binomtest(20, 30).pvalue)
    assert significance.paired_test([np.ones(2), np.array([1.0, 0, 0, 0])]) == pytest.approx(0.25)
    continuous = np.linspace(0.1, 0.9, 40)
    assert significance.paired_test([continuous], replicates=999) == pytest.approx(1 / 1000)
    # many distinct differences around 0: the Monte Carlo p is near the sign-flip's normal limit
    x = np.random.default_rng(0).normal(0.05, 1.0, 400)
    z = abs(x.sum()) / np.sqrt((x**2).sum())
    assert significance.paired_test([x], replicates=20_000) == pytest.approx(2 * stats.norm.sf(z), abs=0.02)


def sign_flip_p(diffs_by_seed: list[np.ndarray]) -> Fraction:
    """The sign-flip p by brute force, in exact rational arithmetic: every one of the 2^n sign
    patterns of the nonzero weighted differences (the scores read as the decimals they print)."""
    k = len(diffs_by_seed)
    weighted = [Fraction(str(float(x))) / (k * len(d)) for d in diffs_by_seed for x in d if x]
    observed = abs(sum(weighted))
    patterns = itertools.product((1, -1), repeat=len(weighted))
    extreme = sum(abs(sum(s * w for s, w in zip(signs, weighted))) >= observed for signs in patterns)
    return Fraction(extreme, 2 ** len(weighted))


@pytest.mark.parametrize("seed", range(8))
def test_the_exact_p_is_exact_for_any_scores(seed):
    """Non-dyadic scores (3 decimals, some repeated, some 0) of 3 to 11 items over 1 to 3
    seeds of unequal sizes: the p is the brute-force enumeration's, ties included. Five
    distinct positive magnitudes: only all-plus and all-minus are as extreme, p = 2/32 (the
    9-decimal rounding of each step once lost the observed pattern itself, p = 0)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 12))
    pool = rng.integers(-1999, 2000, n if seed % 2 else 3) / 1000
    items = rng.choice(np.append(pool, 0.0), n)
    cuts = sorted(rng.choice(np.arange(1, n), int(rng.integers(0, 3)), replace=False))
    diffs = np.split(items, cuts)
    assert significance.paired_test(diffs) == pytest.approx(float(sign_flip_p(diffs)), abs=1e-12)
    five = np.array([1.617, 1.709, 0.675, 1.536, 0.464])
    assert significance.paired_test([five]) == pytest.approx(0.0625, abs=1e-12)


def test_the_seed_level_p_is_never_0():
    """Five seeds with the same difference have no variance for a t statistic: a mean of 0
    gives p = 1, a nonzero mean the exact sign test over the seeds, 2 x 0.5^5 = 0.0625 (the
    t test said 0); the interval is the point. Through the table too."""
    assert significance.seed_interval([0.1] * 5) == pytest.approx((0.1, 0.1, 0.1, 0.0625))
    assert significance.seed_interval([0.0] * 5)[3] == 1.0
    assert significance.seed_interval([0.1, 0.1, 0.1, 0.1, 0.0])[3] > 0
    runs, evaluations, initial = two_seed_study(dict.fromkeys(range(1, 6), 2))
    t = by_name(compare.comparison(runs, evaluations, None, initial, 500))
    assert t.loc["sparta", "vs_best_init_seed_p"] == pytest.approx(0.0625)
    assert t.loc["sparta", "vs_best_init_seed_p_holm"] == pytest.approx(0.0625)  # a family of 1
    assert np.isnan(t.loc["sparta", "vs_best_init_seed_mde"])  # no variance to plan with


def two_seed_study(gains: dict[int, int], n: int = 10):
    """Best init (a) right on 3 of n test items in each seed; Sparta's member right on
    3 + gains[seed]."""
    runs, evaluations, initial = [], {}, {}
    for s, gain in gains.items():
        run = f"s/sparta-seed{s}"
        runs.append({"run": run, "experiment": "sparta", "seed": s})
        initial[run] = evaluation("a", 0, ones(5, n), ones(3, n))
        evaluations[run] = evaluation("a", 1, ones(6, n), ones(3 + gain, n))
    return pd.DataFrame(runs), evaluations, initial


def test_each_seed_has_its_own_difference():
    runs, evaluations, initial = two_seed_study({1: 4, 2: -1, 3: 0})
    table = compare.comparison(runs, evaluations, None, initial, 2_000)
    t = by_name(table)
    assert compare.per_seed(t.loc["sparta", "vs_best_init_per_seed"]) == {
        1: "+0.4000",
        2: "-0.1000",
        3: "+0.0000",
    }
    assert compare.per_seed(t.loc["sparta", "test_per_seed"]) == {1: "0.7000", 2: "0.2000", 3: "0.3000"}
    assert compare.per_seed(t.loc["sparta", "selected"]) == {1: "a@1", 2: "a@1", 3: "a@1"}
    assert t.loc["sparta", "vs_best_init"] == pytest.approx(0.1)  # the mean of the seeds' differences
    assert compare.per_seed(t.loc["best init", "vs_sparta_per_seed"])[2] == "+0.1000"
    assert np.isnan(t.loc["sparta", "vs_best_init_seed_low"])  # 3 seeds: no seed-level interval
    tables.to_arrow(table, "comparison")  # the table contract holds
    text = compare.format_table(table)
    assert "conditional on these training runs" in text and "+0.4000" in text


def test_five_seeds_add_a_t_interval_over_seeds():
    gains = {1: 4, 2: -1, 3: 0, 4: 2, 5: 1}
    runs, evaluations, initial = two_seed_study(gains)
    t = by_name(compare.comparison(runs, evaluations, None, initial, 2_000))
    x = np.array(list(gains.values())) / 10
    half = stats.t.ppf(0.975, 4) * x.std(ddof=1) / np.sqrt(5)  # 2.776 x sd / sqrt(5)
    low, high = t.loc["sparta", ["vs_best_init_seed_low", "vs_best_init_seed_high"]]
    assert (low, high) == pytest.approx((x.mean() - half, x.mean() + half))
    assert t.loc["sparta", "vs_best_init_seed_p"] == pytest.approx(stats.ttest_1samp(x, 0).pvalue)
    assert "seed-level 95% t interval" in compare.format_table(t.reset_index())


def test_minimum_detectable_difference_by_hand():
    """One seed, 100 items: 20 gain (+1), 10 lose (-1), 70 tie. The variance of the paired
    differences is 0.30 - 0.1^2 (x 100/99): MDE = (1.960 + 0.842) x sd / sqrt(100)."""
    d = np.array([1.0] * 20 + [-1.0] * 10 + [0.0] * 70)
    expected = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * np.sqrt((0.30 - 0.01) * 100 / 99 / 100)
    assert significance.minimum_detectable_difference([d]) == pytest.approx(expected)
    assert expected == pytest.approx(0.151, abs=0.001)
    # two seeds of the same design: the mean of two means, so sqrt(2) smaller
    assert significance.minimum_detectable_difference([d, d]) == pytest.approx(expected / np.sqrt(2))
    runs, evaluations, initial = two_seed_study({1: 4, 2: -1})
    table = compare.comparison(runs, evaluations, None, initial, 500)
    assert table["vs_best_init_mde"].notna().any()
    assert "minimum detectable difference" in compare.format_table(table)


def test_the_mde_at_holms_first_step_and_over_seeds():
    """Holm's first step tests at 0.05 / m: the MDE's (1.960 + 0.842) becomes
    (z_{1 - 0.05/(2m)} + 0.842), 1.155 times larger at m = 3. With 5 seeds, the seed-level MDE
    is the difference at which the t test on the seeds' differences (4 df, their sd) has 80%
    power (noncentral t), and at 0.05 / the seed family's size a larger one."""
    d = np.array([1.0] * 20 + [-1.0] * 10 + [0.0] * 70)
    mde = significance.minimum_detectable_difference([d])
    assert significance.holm_mde(mde, 3) == pytest.approx(mde * 1.155, abs=0.001)
    assert significance.holm_mde(mde, 3) == pytest.approx(
        significance.minimum_detectable_difference([d], 0.05 / 3)
    )
    assert significance.holm_mde(mde, 1) == pytest.approx(mde)
    x = np.array([0.4, -0.1, 0.0, 0.2, 0.1])
    delta, sd = significance.seed_minimum_detectable_difference(x), x.std(ddof=1)
    crit = stats.t.ppf(0.975, 4)
    nc = delta * np.sqrt(5) / sd
    assert stats.nct.sf(crit, 4, nc) + stats.nct.cdf(-crit, 4, nc) == pytest.approx(0.8)
    assert significance.seed_minimum_detectable_difference(x, 0.05 / 3) > delta
    # seeds whose spread puts the search far into the noncentral t's tail (scipy gives NaN
    # there): a number, not a crash of the comparison
    wide = [0.1399, 0.0293, 0.0106, -0.0044, 0.0357]
    assert 0 < significance.seed_minimum_detectable_difference(wide, 0.05 / 4) < 1
    gains = {1: 4, 2: -1, 3: 0, 4: 2, 5: 1}
    runs, evaluations, initial = two_seed_study(gains)
    table = compare.comparison(runs, evaluations, None, initial, 500)
    t = by_name(table)
    assert t.loc["sparta", "vs_best_init_seed_mde"] == pytest.approx(delta)
    assert t.loc["sparta", "vs_best_init_mde_holm"] == pytest.approx(t.loc["sparta", "vs_best_init_mde"])
    text = compare.format_table(table)
    assert "at Holm's first step (alpha 0.05/1" in text and "over new training runs (seed-level" in text
    tables.to_arrow(table, "comparison")


# --- best init per run -----------------------------------------------------------------------


def pool_size_study(order: list[str], keyed_by: str = "run"):
    """Seed 1 and 2. Initial members a, b, c, and d (only pool_4 has d); d is the best initial
    member on validation (test 0.2), then a (test 0.5). Sparta (a, b, c) and pool_4 (a..d)
    both end with a member right on 6 test items."""
    init = pd.concat(
        [
            evaluation("a", 0, ones(6), ones(5)),
            evaluation("b", 0, ones(2), ones(9)),
            evaluation("c", 0, ones(1), ones(1)),
            evaluation("d", 0, ones(8), ones(2)),
        ]
    )
    members = {"sparta": ["a", "b", "c"], "pool_4": ["a", "b", "c", "d"]}
    runs, evaluations, initial = [], {}, {}
    for exp in order:
        for s in (1, 2):
            run = f"s/{exp}-seed{s}"
            runs.append({"run": run, "experiment": exp, "seed": s, "members": members[exp]})
            evaluations[run] = pd.concat([evaluation(m, 1, ones(9), ones(6)) for m in members[exp]])
            if keyed_by == "run":
                initial[run] = init[init["member"].isin(members[exp])]
            else:
                initial[s] = init  # every member of the seed: each run's own are picked by name
    return pd.DataFrame(runs), evaluations, initial


def test_best_init_is_each_runs_own_whatever_the_order():
    tables_ = []
    for order in (["sparta", "pool_4"], ["pool_4", "sparta"]):
        for keyed in ("run", "seed"):
            runs, evaluations, initial = pool_size_study(order, keyed)
            tables_.append(compare.comparison(runs, evaluations, None, initial, 1_000))
    first = by_name(tables_[0])
    # pool_4's own best init is its reference, not compared with sparta: family = sparta and
    # pool_4 vs their best inits, pool_4 vs sparta
    assert np.isnan(first.loc["best init (pool_4)", "vs_sparta"]) and (tables_[0]["family_size"] == 3).all()
    assert "Holm family: 3 comparisons" in compare.format_table(tables_[0])
    assert first.loc["sparta", "vs_best_init"] == pytest.approx(0.1)  # 0.6 - a's 0.5
    assert first.loc["pool_4", "vs_best_init"] == pytest.approx(0.4)  # 0.6 - d's 0.2
    assert first.loc["best init", "test"] == pytest.approx(0.5)
    assert first.loc["best init (pool_4)", "test"] == pytest.approx(0.2)
    assert compare.per_seed(first.loc["best init (pool_4)", "selected"]) == {1: "d@0", 2: "d@0"}
    for other in tables_[1:]:
        pd.testing.assert_frame_equal(
            by_name(other).sort_index(), first.sort_index(), check_exact=False, rtol=1e-12
        )


def test_an_experiment_on_some_tasks_only_has_rows_there():
    """study.experiment_tasks (the paper's ablations on four of its tasks): the ablation runs
    on task t only; t's rows compare it with best init and Sparta, u's rows have no ablation
    row and no comparison with it."""
    runs, evaluations, initial = [], {}, {}
    for task, experiments in {"t": ["sparta", "ablation"], "u": ["sparta"]}.items():
        for exp in experiments:
            for s in (1, 2):
                run = f"s/{task}/{exp}-seed{s}"
                runs.append({"run": run, "experiment": exp, "seed": s})
                initial[run] = evaluation("a", 0, ones(5), ones(3)).assign(task=task)
                final = ones(7) if exp == "sparta" else ones(4)
                evaluations[run] = evaluation("a", 1, ones(6), final).assign(task=task)
    table = compare.comparison(pd.DataFrame(runs), evaluations, None, initial, 1_000)
    rows = table.groupby("task")["experiment"].apply(list).to_dict()
    assert rows == {"t": ["best init", "sparta", "ablation"], "u": ["best init", "sparta"]}
    t = by_name(table[table["task"] == "t"])
    assert t.loc["ablation", "vs_best_init"] == pytest.approx(0.1)  # 0.4 - 0.3
    assert t.loc["ablation", "vs_sparta"] == pytest.approx(-0.3)  # 0.4 - 0.7
    assert by_name(table[table["task"] == "u"]).loc["sparta", "vs_best_init"] == pytest.approx(0.4)
    tables.to_arrow(table, "comparison")
    assert "ablation" in compare.format_table(table)


# --- checkpoint selection --------------------------------------------------------------------


def selection_study(select_column: str | None = None):
    """Initial a (validation 5/10, test 3/10). After iteration 1, b is best on validation
    (9/10, test 8/10); after iteration 2 (final), a is (7/10, test 4/10)."""
    runs = pd.DataFrame({"run": ["s/sparta-seed1"], "experiment": ["sparta"], "seed": [1]})
    if select_column:
        runs["select_from"] = select_column
    evaluations = {
        "s/sparta-seed1": pd.concat(
            [
                evaluation("a", 1, ones(3), ones(2)),
                evaluation("b", 1, ones(9), ones(8)),
                evaluation("a", 2, ones(7), ones(4)),
                evaluation("b", 2, ones(6), ones(10)),
            ]
        )
    }
    initial = {
        "s/sparta-seed1": pd.concat(
            [evaluation("a", 0, ones(5), ones(3)), evaluation("b", 0, ones(1), ones(1))]
        )
    }
    return runs, evaluations, initial


def test_select_from_all_checkpoints_or_the_final_ones():
    runs, evaluations, initial = selection_study()
    every = by_name(compare.comparison(runs, evaluations, None, initial, 500))  # default: all
    final = by_name(compare.comparison(runs, evaluations, None, initial, 500, select_from="final"))
    assert every.loc["sparta", "selected"] == "1=b@1" and every.loc["sparta", "test"] == pytest.approx(0.8)
    assert final.loc["sparta", "selected"] == "1=a@2" and final.loc["sparta", "test"] == pytest.approx(0.4)
    assert (every.loc["sparta", "select_from"], final.loc["sparta", "select_from"]) == ("all", "final")
    assert every.loc["sparta", "vs_best_init"] == pytest.approx(0.5)
    assert final.loc["sparta", "vs_best_init"] == pytest.approx(0.1)
    # a run's own select_from (runs column) wins over the argument
    runs_final, *_ = selection_study("final")
    over = by_name(compare.comparison(runs_final, evaluations, None, initial, 500, select_from="all"))
    assert over.loc["sparta", "selected"] == "1=a@2"
    with pytest.raises(ValueError, match="select_from"):
        compare.comparison(runs, evaluations, None, initial, 500, select_from="best")


def test_select_from_all_can_pick_the_initial_pool_and_ties_go_to_the_earlier_checkpoint():
    runs, evaluations, initial = selection_study()
    initial["s/sparta-seed1"] = evaluation("a", 0, ones(10), ones(3))  # the initial a is best
    t = by_name(compare.comparison(runs, evaluations, None, initial, 500))
    assert t.loc["sparta", "selected"] == "1=a@0" and t.loc["sparta", "vs_best_init"] == 0.0
    same = pd.concat([evaluation(m, c, ones(5), ones(c + 2)) for m in "ab" for c in (1, 2)])
    pick = compare.best_checkpoint(pd.concat([evaluation("a", 0, ones(5), ones(1)), same]), TASK)
    assert pick == ("a", 0)  # every validation score ties: the earliest checkpoint, then the name
    assert compare.best_checkpoint(same, TASK) == ("a", 1)


# --- what a study shares per seed ------------------------------------------------------------

BASE = Path("/nonexistent/tiny")  # expand() reads no file


def study(**experiments) -> dict:
    cfg = tiny_config(BASE, "s")
    cfg["study"] = {"seeds": [1, 2], "experiments": experiments}
    return cfg


def test_keys_that_cannot_change_the_pool_do_not_split_it():
    s = expand(
        study(
            sparta={},
            spin={"method": "spin", "prompts": {"reference_column": "solution"}},
            final_only={"evaluation": {"checkpoints": "final", "batch_size": 2}},
        )
    )
    assert set(s.inits) == {"s/_init-seed1", "s/_init-seed2"}
    assert {s.init_of[e] for e in s.experiments if e.endswith("seed1")} == {"s/_init-seed1"}
    # the shared prompt tables carry SPIN's reference answers
    assert s.inits["s/_init-seed1"].prompts.reference_column == "solution"


def test_a_seed_that_would_need_two_pools_stops():
    with pytest.raises(
        SettingsError, match=r"sparta and more_sft \(seed 1\).*two different initial pools.*sft"
    ):
        expand(study(sparta={}, more_sft={"sft": {"max_steps": 5}}))
    with pytest.raises(SettingsError, match="prompts.reference_column differs"):
        expand(
            study(
                a={"prompts": {"reference_column": "solution"}},
                b={"prompts": {"reference_column": "prompt"}},
            )
        )
    with pytest.raises(SettingsError, match="evaluation.tasks differs"):
        expand(study(a={}, b={"evaluation": {"tasks": [{"name": "other", "source": "prompts"}]}}))


def test_a_pool_size_experiment_may_have_a_pool_of_its_own():
    members = tiny_config(BASE)["members"] + [{"name": "dan", "base": "big"}]
    s = expand(
        study(
            sparta={},
            pool_4={"members": members, "base_models": {"big": {"path": "/nonexistent/big"}}},
            pool_4_more_sft={"members": members, "sft": {"max_steps": 5}},
        )
    )
    # pool_4 shares the seed's pool (its new base model joins it); the other has its own
    assert s.init_of["s/pool_4-seed1"] == s.init_of["s/sparta-seed1"] == "s/_init-seed1"
    assert s.init_of["s/pool_4_more_sft-seed1"] == "s/_init-seed1-2"
    shared = s.inits["s/_init-seed1"]
    assert list(shared.member_names) == ["ann", "bob", "cid", "dan"]
    assert set(shared.base_models) == {"tiny", "big"}


def test_a_pool_size_experiments_best_init_is_tested_under_test_selected():
    """evaluation.test: selected tests only each checkpoint's best member on validation. The
    seed's shared initial pool holds every member of every pool size; the best of pool_2's
    members need not be the best of all, so a shared pool that some experiment uses only part
    of is tested whole (test: all there, at checkpoint 0; the experiments' own checkpoints stay
    selected), and a pool's best init always has test rows. An evaluation made before (only
    the best of all tested) stops the comparison with what to do, not a silent NaN."""
    cfg = study(sparta={}, pool_2={"members": tiny_config(BASE)["members"][:2]})
    cfg["evaluation"] = {**cfg.get("evaluation", {}), "test": "selected"}
    s = expand(cfg)
    assert {s.inits[i].evaluation.test for i in s.inits} == {"all"}
    assert {e.evaluation.test for e in s.experiments.values()} == {"selected"}
    alone = study(sparta={}, spin={"method": "spin"})
    alone["evaluation"] = {**alone.get("evaluation", {}), "test": "selected"}
    assert {i.evaluation.test for i in expand(alone).inits.values()} == {"selected"}
    # the comparison (pool_size_study): d is the best of a..d on validation, a the best of
    # sparta's a, b, c; the whole pool tested gives both best inits test rows; only d tested
    # (the old evaluation) stops
    runs, evaluations, initial = pool_size_study(["sparta", "pool_4"], "seed")
    table = by_name(compare.comparison(runs, evaluations, None, initial, 500))
    assert table.loc["sparta", ["vs_best_init", "vs_best_init_p"]].notna().all()
    old = {s_: ev[(ev["split"] != "test") | (ev["member"] == "d")] for s_, ev in initial.items()}
    with pytest.raises(ValueError, match=r"a@0, best on validation, has no test scores.*rerun"):
        compare.comparison(runs, evaluations, None, old, 500)


def test_cost_counts_requests_and_judge_tokens_per_iteration():
    """One prompt, SPPO with K = 3 answers: 3 comparisons, each in both orders, are 6 requests
    (2 per answer row); a meta-rewarding prompt: 4 self-judgments (1 request each, 50 tokens
    generated each) and a meta row of 3 sampled judgments + 6 meta-judge orders = 9 requests;
    two seeds of SPPO (read 300 and 500 tokens) average to 400."""

    def resp(n):
        return pd.DataFrame({"n_tokens": [10] * n, "iteration": 1})

    def judg(requests, read, generated):
        return pd.DataFrame(
            {"requests": requests, "prompt_tokens": read, "generated_tokens": generated, "iteration": 1}
        )

    runs = pd.DataFrame(
        {"run": ["s1", "s2", "m1"], "experiment": ["sppo", "sppo", "meta"], "seed": [1, 2, 1]}
    )
    responses = {"s1": resp(3), "s2": resp(3), "m1": resp(4)}
    judgments = {
        "s1": judg([2, 2, 2], [100, 100, 100], [0, 0, 0]),
        "s2": judg([2, 2, 2], [150, 200, 150], [0, 0, 0]),
        "m1": judg([1, 1, 1, 1, 9], [80, 80, 80, 80, 900], [50, 50, 50, 50, 120]),
    }
    cost = compare.cost(runs, responses, judgments)
    tables.to_arrow(cost, "cost")
    got = cost.set_index("experiment")
    assert got.loc["sppo", "judge_requests"] == 6 and got.loc["sppo", "tokens_judged"] == 400
    assert got.loc["sppo", "judge_tokens_generated"] == 0 and got.loc["sppo", "answers"] == 3
    assert got.loc["meta", "judge_requests"] == 4 + 9 and got.loc["meta", "judgments"] == 5
    assert got.loc["meta", "judge_tokens_generated"] == 4 * 50 + 120


def test_judgments_written_before_the_request_columns_still_read(tmp_path):
    """A judgments table of a run made before ``requests`` and ``generated_tokens`` existed
    reads with them null, and its cost shows them unknown (NaN), not 0; a method that judges
    nothing (no rows) spent 0."""
    row = {c: None for c in tables.columns("judgments") if c not in ("requests", "generated_tokens")}
    row.update(duel_id="d", judge="ann", target="ann", sample=0, kind="score", score=5.0, prompt_tokens=7)
    old = pd.DataFrame([row])
    schema = tables.SCHEMAS["judgments"]
    schema = schema.remove(schema.get_field_index("generated_tokens"))
    schema = schema.remove(schema.get_field_index("requests"))
    path = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pandas(old, schema=schema, preserve_index=False), path)
    read = tables.read(path, "judgments")
    assert read["requests"].isna().all() and read["generated_tokens"].isna().all()
    runs = pd.DataFrame({"run": ["a", "b"], "experiment": ["old", "spin"], "seed": [1, 1]})
    responses = {r: pd.DataFrame({"n_tokens": [3], "iteration": 1}) for r in ("a", "b")}
    none = tables.empty("judgments").assign(iteration=pd.Series(dtype=int))
    cost = compare.cost(runs, responses, {"a": read.assign(iteration=1), "b": none}).set_index("experiment")
    assert np.isnan(cost.loc["old", "judge_requests"]) and cost.loc["old", "tokens_judged"] == 7
    assert cost.loc["spin", "judge_requests"] == 0
    tables.to_arrow(cost.reset_index(), "cost")


def test_tables_written_with_the_older_member_columns_read_with_todays(tmp_path):
    """Duels, responses, preferences and histories of runs made before the member columns were
    named ``member*`` (``model_a``, ``model``, ``chosen_model``, ...) read with today's names;
    a table that lacks a column outright still names what is missing."""
    renamed = {"duels": "model_a", "responses": "model", "preferences": "chosen_model"}
    for kind, old_name in renamed.items():
        new_names = tables.columns(kind)
        old_names = [{v: k for k, v in tables.RENAMED[kind].items()}.get(c, c) for c in new_names]
        assert old_name in old_names
        frame = pd.DataFrame([{c: None for c in old_names}])
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
        assert list(tables.read(path, kind).columns) == new_names
    history = pd.DataFrame([{c: None for c in tables.columns("history")}]).rename(columns={"member_a": "x"})
    history.to_parquet(tmp_path / "h.parquet")
    with pytest.raises(tables.TableError, match=r"missing column\(s\) \['member_a'\]"):
        tables.read(tmp_path / "h.parquet", "reputation_history")
