"""The paper's comparison (its Table 1) for a study, with uncertainty (pure).

Per task and experiment, for every seed (one training run each): the member and checkpoint
best on validation (``select_from``: ``all``, among every member at every evaluated
checkpoint, the initial pool included, as the paper picks "from a pool of 80"; ``final``,
among the final members) is scored on the test split. ``best init`` is computed per run: the
best member of that run's own initial pool on validation, scored on test (so a pool-size
experiment is compared with the best of its own pool, whatever the order of the
experiments).

Every difference (to the run's best init and to Sparta) is reported three ways:

- each seed's own difference (``*_per_seed``);
- a paired bootstrap 95% interval over test items, stratified by seed (items resampled
  within each seed, the seeds kept): it is *conditional on these training runs*, it says
  how sure the test items make us about these runs, not what another training run would
  give;
- with 5 seeds or more, a seed-level t interval (n - 1 degrees of freedom) over the seeds'
  differences: what a new training run would give.

The family of comparisons (each experiment against its best init and against Sparta, every
task) is adjusted with Holm-Bonferroni; ``*_significant`` (and the printed ``*``) is the
adjusted p below 0.05. ``*_mde`` is the design's minimum detectable difference: paired, at
the study's test size and seeds, 80% power, two-sided alpha 0.05, from the variance of the
paired differences (for 0/1 scores: the discordance).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from .tables import SCHEMAS

BEST_INIT = "best init"
SELECT_FROM = ("all", "final")
COMPARISONS = ("vs_best_init", "vs_sparta")
MIN_SEEDS_FOR_SEED_INTERVAL = 5
"""Below this many seeds the seed-level interval is not reported (a t interval on 2-4
points is too wide to help and too sensitive to one odd run)."""
ALPHA = 0.05
POWER = 0.8


# --- selection -------------------------------------------------------------------------------


def selected_items(evaluation: pd.DataFrame, member: str, checkpoint: int, task: str) -> pd.Series:
    """Test scores per item of one member at one checkpoint on a task."""
    rows = evaluation[
        (evaluation["member"] == member)
        & (evaluation["checkpoint"] == checkpoint)
        & (evaluation["task"] == task)
        & (evaluation["split"] == "test")
    ]
    return rows.set_index("example_id")["score"].astype(float)


def best_on_validation(evaluation: pd.DataFrame, task: str, checkpoint: int) -> str:
    """The member with the best validation mean at a checkpoint (ties: the first by name)."""
    val = evaluation[(evaluation["task"] == task) & (evaluation["split"] == "validation")]
    val = val[val["checkpoint"] == checkpoint]
    means = val.groupby("member")["score"].mean()
    return sorted(means.index, key=lambda m: (-means[m], m))[0]


def best_checkpoint(candidates: pd.DataFrame, task: str) -> tuple[str, int] | None:
    """(member, checkpoint) with the best validation mean among the candidates (every
    (member, checkpoint) in the table); ties: the earlier checkpoint, then the first member by
    name, as a run's own selection (``analysis.select_best``). None when the task has no
    validation scores."""
    val = candidates[(candidates["task"] == task) & (candidates["split"] == "validation")]
    if len(val) == 0:
        return None
    means = val.groupby(["member", "checkpoint"])["score"].mean()
    (member, checkpoint), _ = min(means.items(), key=lambda kv: (-kv[1], kv[0][1], kv[0][0]))
    return str(member), int(checkpoint)


def candidates(evaluation: pd.DataFrame, initial: pd.DataFrame, task: str, select_from: str) -> pd.DataFrame:
    """The (member, checkpoint) evaluations a run's selection picks from on a task: every
    evaluated checkpoint of its members and its initial pool (``all``), or its last
    checkpoint only (``final``)."""
    if select_from not in SELECT_FROM:
        raise ValueError(f"select_from: {' or '.join(SELECT_FROM)}, not {select_from!r}")
    later = evaluation[(evaluation["task"] == task) & (evaluation["checkpoint"] > 0)]
    if select_from == "final":
        return later[later["checkpoint"] == later["checkpoint"].max()] if len(later) else later
    return pd.concat([initial[initial["task"] == task], later], ignore_index=True)


# --- statistics ------------------------------------------------------------------------------


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
    (one array per seed), stratified by seed: items are resampled within each seed and the
    seeds kept, so the interval is conditional on these training runs. The difference is the
    mean over seeds of each seed's mean difference."""
    rng = np.random.default_rng(seed)
    diffs_by_seed = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d)]
    if not diffs_by_seed:
        return (float("nan"),) * 4
    observed = float(np.mean([d.mean() for d in diffs_by_seed]))
    means = np.zeros(replicates)
    for d in diffs_by_seed:
        means += _resampled_means(d, replicates, rng)
    means /= len(diffs_by_seed)
    low, high = np.percentile(means, [2.5, 97.5])
    p = min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0)))
    return observed, float(low), float(high), float(p)


def seed_interval(
    per_seed: list[float] | np.ndarray, alpha: float = ALPHA
) -> tuple[float, float, float, float]:
    """(mean, low, high, two-sided p) of a t interval over per-seed differences, with n - 1
    degrees of freedom: the question "what would another training run give"."""
    x = np.asarray(per_seed, dtype=float)
    if len(x) < 2:
        return (float("nan"),) * 4
    mean, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x)))
    if se == 0:
        return mean, mean, mean, 0.0 if mean != 0 else 1.0
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
    share of discordant items minus the squared mean difference)."""
    diffs = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d) > 1]
    if not diffs:
        return float("nan")
    var = sum(float(np.var(d, ddof=1)) / len(d) for d in diffs) / len(diffs) ** 2
    z = float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))
    return z * float(np.sqrt(var))


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


# --- the table -------------------------------------------------------------------------------


def _joined(values: dict[int, str]) -> str | None:
    return ";".join(f"{s}={v}" for s, v in sorted(values.items())) or None


def per_seed(text) -> dict[int, str]:
    """A ``*_per_seed`` / ``selected`` cell as {seed: value} (values as written)."""
    if not isinstance(text, str) or not text:
        return {}
    return {int(s): v for s, v in (part.split("=", 1) for part in text.split(";"))}


def _run_initial(r, initial: dict, evaluations: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The evaluation of a run's own initial members at checkpoint 0: ``initial`` keyed by
    run (or, as before, by seed), restricted to the run's members when the runs table lists
    them; the run's own checkpoint-0 rows when ``initial`` has neither."""
    if r.run in initial:
        table = initial[r.run]
    elif int(r.seed) in initial:
        table = initial[int(r.seed)]
    else:
        table = evaluations[r.run]
    table = table[table["checkpoint"] == 0]
    members = getattr(r, "members", None)
    if members is not None and not (np.isscalar(members) and pd.isna(members)):
        table = table[table["member"].isin(list(members))]
    return table


def _diffs(mine: dict[int, pd.Series], other: dict[int, pd.Series]) -> dict[int, np.ndarray]:
    """Per seed in both: paired per-item differences on the items both have (sorted by id,
    so that a comparison and its mirror resample the same items)."""
    out = {}
    for s, items in mine.items():
        if s in other:
            both = items.index.intersection(other[s].index).sort_values()
            if len(both):
                out[s] = (items[both] - other[s][both]).to_numpy()
    return out


def comparison(
    runs: pd.DataFrame,
    evaluations: dict[str, pd.DataFrame],
    selections: dict[str, pd.DataFrame] | None = None,
    initial: dict | None = None,
    replicates: int = 10_000,
    select_from: str = "all",
) -> pd.DataFrame:
    """The comparison table, one row per (task, experiment) and per initial pool (``best
    init``; a pool-size experiment's own pool gets ``best init (<experiments>)``).

    ``runs``: one row per run (run, experiment, seed; optionally members, the run's initial
    members, and select_from, overriding the argument for that run); ``evaluations``: per
    run, its members' evaluation at the checkpoints it evaluated after the initial pool;
    ``selections``: per run, its selection table (only its tasks are used: the tasks
    compared); ``initial``: the initial pool's evaluation (checkpoint 0) per run, or per seed
    (restricted to each run's members when ``runs`` lists them)."""
    runs = runs.reset_index(drop=True)
    initial = initial or {}
    run_list = list(runs.itertuples(index=False))
    inits = {r.run: _run_initial(r, initial, evaluations) for r in run_list}
    if selections is not None:
        tasks = sorted({t for sel in selections.values() for t in sel["task"]})
    else:
        tasks = sorted({t for ev in [*evaluations.values(), *inits.values()] for t in ev["task"]})
    experiments = list(dict.fromkeys(runs["experiment"]))

    # the initial pools (by members), one best-init row each; the most shared one is "best init"
    pool_of = {
        exp: frozenset(m for r in run_list if r.experiment == exp for m in inits[r.run]["member"])
        for exp in experiments
    }
    sharing: dict[frozenset, list[str]] = {}
    for exp in experiments:
        sharing.setdefault(pool_of[exp], []).append(exp)
    ranked = sorted(sharing, key=lambda k: (-len(sharing[k]), "sparta" not in sharing[k], sorted(sharing[k])))
    pool_label = {
        k: BEST_INIT if i == 0 else f"{BEST_INIT} ({', '.join(sorted(sharing[k]))})"
        for i, k in enumerate(ranked)
    }
    init_rows = [pool_label[k] for k in ranked]

    # per (task, row): seed -> test items, seed -> "member@checkpoint"; per (task, experiment):
    # seed -> its run's own best init
    scores: dict[tuple[str, str], dict[int, pd.Series]] = {}
    chosen: dict[tuple[str, str], dict[int, str]] = {}
    own_init: dict[tuple[str, str], dict[int, pd.Series]] = {}
    how: dict[str, set[str]] = {}
    for task in tasks:
        for r in sorted(run_list, key=lambda r: str(r.run)):
            s, init = int(r.seed), inits[r.run]
            first = best_checkpoint(init, task)
            if first is not None:
                items = selected_items(init, *first, task)
                own_init.setdefault((task, r.experiment), {})[s] = items
                label = pool_label[pool_of[r.experiment]]
                if s not in scores.get((task, label), {}):
                    scores.setdefault((task, label), {})[s] = items
                    chosen.setdefault((task, label), {})[s] = f"{first[0]}@{first[1]}"
            mode = getattr(r, "select_from", None)
            mode = select_from if mode is None or (np.isscalar(mode) and pd.isna(mode)) else str(mode)
            how.setdefault(r.experiment, set()).add(mode)
            pool = candidates(evaluations[r.run], init, task, mode)
            pick = best_checkpoint(pool, task)
            if pick is not None:
                scores.setdefault((task, r.experiment), {})[s] = selected_items(pool, *pick, task)
                chosen.setdefault((task, r.experiment), {})[s] = f"{pick[0]}@{pick[1]}"

    reference = "sparta" if "sparta" in experiments else None
    out, keys = [], []  # keys: per row and comparison, the unordered pair compared (its family key)
    for task in tasks:
        for label in [*init_rows, *experiments]:
            seeds_items = scores.get((task, label), {})
            if not seeds_items:
                continue
            is_init = label in init_rows
            means = {s: float(v.mean()) for s, v in seeds_items.items()}
            row = {
                "task": task,
                "experiment": label,
                "seeds": len(seeds_items),
                "items": int(np.mean([len(v) for v in seeds_items.values()])),
                "test": float(np.mean(list(means.values()))),
                "test_sd": float(np.std(list(means.values()), ddof=1)) if len(means) > 1 else float("nan"),
                "select_from": "initial" if is_init else ",".join(sorted(how[label])),
                "selected": _joined(chosen[(task, label)]),
                "test_per_seed": _joined({s: f"{m:.4f}" for s, m in means.items()}),
            }
            row_keys = {}
            for name in COMPARISONS:
                if name == "vs_best_init":
                    other = {} if is_init else own_init.get((task, label), {})
                    ref = None if is_init else pool_label[pool_of[label]]
                else:
                    other = scores.get((task, reference), {}) if reference not in (None, label) else {}
                    ref = reference
                diffs = _diffs(seeds_items, other)
                d, low, high, p = (
                    paired_bootstrap(list(diffs.values()), replicates) if diffs else (np.nan,) * 4
                )
                seed_means = [float(v.mean()) for v in diffs.values()]
                if len(seed_means) >= MIN_SEEDS_FOR_SEED_INTERVAL:
                    _, s_low, s_high, s_p = seed_interval(seed_means)
                else:
                    s_low = s_high = s_p = float("nan")
                row.update(
                    {
                        name: d,
                        f"{name}_low": low,
                        f"{name}_high": high,
                        f"{name}_p": p,
                        f"{name}_per_seed": _joined({s: f"{v.mean():+.4f}" for s, v in diffs.items()}),
                        f"{name}_seed_low": s_low,
                        f"{name}_seed_high": s_high,
                        f"{name}_seed_p": s_p,
                        f"{name}_mde": minimum_detectable_difference(list(diffs.values())),
                    }
                )
                row_keys[name] = (task, frozenset((label, ref))) if diffs else None
            out.append(row)
            keys.append(row_keys)
    table = pd.DataFrame(out)
    return _adjust(table, keys)


def _adjust(table: pd.DataFrame, keys: list[dict]) -> pd.DataFrame:
    """Holm-Bonferroni over the family of distinct comparisons in the table (a comparison
    and its mirror, e.g. Sparta vs best init and best init vs Sparta, count once)."""
    columns = SCHEMAS["comparison"].names
    if len(table) == 0:
        return pd.DataFrame(columns=columns)
    for suffix in ("_p", "_seed_p"):
        family: dict = {}
        for i, row_keys in enumerate(keys):
            for name, key in row_keys.items():
                p = table.at[i, f"{name}{suffix}"]
                if key is not None and not np.isnan(p):
                    family.setdefault(key, p)
        adjusted = dict(zip(family, holm(list(family.values()))))
        for name in COMPARISONS:
            table[f"{name}{suffix}_holm"] = [
                adjusted.get(row_keys[name], float("nan")) if row_keys[name] is not None else float("nan")
                for row_keys in keys
            ]
        if suffix == "_p":
            table["family_size"] = len(family)
    for name in COMPARISONS:
        table[f"{name}_significant"] = (table[f"{name}_p_holm"] < ALPHA).astype(bool)
    return table[columns]


def _total(column: pd.Series) -> float:
    """Sum of a count column; NaN when every value is null (tables written before the column
    existed: unknown, not zero); 0 without rows."""
    if len(column) == 0:
        return 0.0
    return float(pd.to_numeric(column, errors="coerce").sum(min_count=1))


def cost(
    runs: pd.DataFrame, responses: dict[str, pd.DataFrame], judgments: dict[str, pd.DataFrame]
) -> pd.DataFrame:
    """Inference per experiment and iteration (mean over seeds): answers generated and their
    tokens; judgments, the model requests judges made, the prompt tokens they read and the
    tokens they generated (the ``cost`` table)."""
    rows = []
    for r in runs.itertuples(index=False):
        resp, judg = responses[r.run], judgments[r.run]
        for it in sorted(set(resp["iteration"]) | set(judg["iteration"])):
            a, j = resp[resp["iteration"] == it], judg[judg["iteration"] == it]
            rows.append(
                {
                    "experiment": r.experiment,
                    "seed": int(r.seed),
                    "iteration": int(it),
                    "answers": len(a),
                    "tokens_generated": int(a["n_tokens"].sum()),
                    "judgments": len(j),
                    "judge_requests": _total(j["requests"]),
                    "tokens_judged": int(j["prompt_tokens"].fillna(0).sum()),
                    "judge_tokens_generated": _total(j["generated_tokens"]),
                }
            )
    per_seed_rows = pd.DataFrame(rows)
    if len(per_seed_rows) == 0:
        return per_seed_rows
    return (
        per_seed_rows.groupby(["experiment", "iteration"], as_index=False, sort=False)
        .mean(numeric_only=True)
        .drop(columns="seed")
    )


# --- text ------------------------------------------------------------------------------------

SELECTION_WORDS = {
    "all": "best on validation among every member at every evaluated checkpoint (initial pool included)",
    "final": "best on validation among the final members",
    "initial": "best on validation among the initial pool",
}


def _cell(r, name: str, kind: str = "") -> str:
    d = getattr(r, name)
    low, high = getattr(r, f"{name}{kind}_low"), getattr(r, f"{name}{kind}_high")
    if d is None or np.isnan(d) or np.isnan(low):
        return ""
    p = getattr(r, f"{name}{kind}_p_holm")
    star = "*" if not np.isnan(p) and p < ALPHA else " "
    return f"{d:+.3f} [{low:+.3f}, {high:+.3f}]{star}"


def format_table(table: pd.DataFrame) -> str:
    """The comparison as text: test score (mean, sd over seeds), the differences with their
    item-bootstrap intervals (stratified by seed), ``*`` where the Holm-adjusted p is below
    0.05; then each seed's own difference, the seed-level intervals (5 seeds or more), the
    family and the design's minimum detectable difference."""
    lines = []
    family = int(table["family_size"].max()) if "family_size" in table and len(table) else 0
    for task, g in table.groupby("task", sort=False):
        n_items, n_seeds = int(g["items"].max()), int(g["seeds"].max())
        modes = sorted({m for v in g["select_from"].dropna() for m in v.split(",")} - {"initial"})
        lines.append(f"task {task} (test items per seed: {n_items}, seeds: {n_seeds})")
        for m in modes:
            lines.append(f"  selection ({m}): {SELECTION_WORDS.get(m, m)}")
        lines.append(f"{'experiment':<22}{'test':>16}{'vs best init':>30}{'vs sparta':>30}")
        for r in g.itertuples(index=False):
            sd = "" if np.isnan(r.test_sd) else f" ± {r.test_sd:.3f}"
            cells = [_cell(r, name) for name in COMPARISONS]
            lines.append(f"{r.experiment:<22}{r.test:>10.3f}{sd:<6}{cells[0]:>30}{cells[1]:>30}")
        lines.append(
            "  brackets: 95% paired bootstrap over test items, stratified by seed (items resampled "
            "within each seed):"
        )
        lines.append(
            "  conditional on these training runs: how sure these test items make us about these "
            "runs, not what a new training run would give."
        )
        lines.append(
            f"  *: Holm-adjusted p < {ALPHA:g}; family of {family} comparisons (each experiment vs "
            "its best init and vs sparta, every task)."
        )
        lines.append("")
        lines.append("  per seed (each training run's own result; selected member@checkpoint):")
        head = f"{'selected':<14}{'test':>8}{'vs best init':>15}{'vs sparta':>12}"
        lines.append(f"  {'experiment':<20}{'seed':>6}  {head}")
        for r in g.itertuples(index=False):
            test, sel = per_seed(r.test_per_seed), per_seed(r.selected)
            vb, vs = per_seed(r.vs_best_init_per_seed), per_seed(r.vs_sparta_per_seed)
            for s in sorted(test):
                lines.append(
                    f"  {r.experiment:<20}{s:>6}  {sel.get(s, ''):<14}{float(test[s]):>8.3f}"
                    f"{vb.get(s, ''):>15}{vs.get(s, ''):>12}"
                )
        if g[[f"{n}_seed_low" for n in COMPARISONS]].notna().any().any():
            lines.append("")
            lines.append(
                "  seed-level 95% t interval (n - 1 df) over the seeds' differences: what a new "
                "training run would give (* Holm-adjusted)"
            )
            lines.append(f"  {'experiment':<20}{'vs best init':>30}{'vs sparta':>30}")
            for r in g.itertuples(index=False):
                cells = [_cell(r, name, "_seed") for name in COMPARISONS]
                if any(cells):
                    lines.append(f"  {r.experiment:<20}{cells[0]:>30}{cells[1]:>30}")
        lines.append("")
        lines.append(
            f"  minimum detectable difference (paired, {n_items} test items x {n_seeds} seeds, "
            f"{POWER:.0%} power, two-sided alpha {ALPHA:g}, from the variance of the paired differences):"
        )
        for name in COMPARISONS:
            mde = g[f"{name}_mde"].dropna()
            if len(mde):
                spread = f" (from {mde.min():.3f} to {mde.max():.3f})" if mde.max() > mde.min() else ""
                lines.append(f"    {name.replace('_', ' ')}: {mde.median():.3f}{spread}")
        lines.append("")
    return "\n".join(lines)
