"""The paper's comparison (its Table 1) for a study, with uncertainty (pure).

Per task and experiment, for every seed (one training run each): the member and checkpoint
best on validation (``select_from``: ``all``, among every member at every evaluated
checkpoint, the initial pool included, as the paper picks "from a pool of 80"; ``final``,
among the final members) is scored on the test split. ``best init`` is computed per run: the
best member of that run's own initial pool on validation, scored on test (so a pool-size
experiment is compared with the best of its own pool, whatever the order of the
experiments).

Every difference (to the run's best init and to Sparta) is reported as each seed's own
difference (``*_per_seed``), a paired bootstrap 95% interval over test items stratified by seed
(conditional on these training runs) with the exact paired sign-flip test's p (``*_p``), and
with 5 seeds or more a seed-level t interval and p (``*_seed_*``: what a new training run would
give); the statistics are :mod:`sparta.significance`'s.

The family of comparisons (each experiment against its own best init and against Sparta,
every task; a comparison and its mirror once; a pool-size experiment's own best init is a
reference row, not compared with Sparta) is adjusted with Holm-Bonferroni, its p-values only
(the intervals are not); ``*_significant`` (and the printed ``*``) is the adjusted p below 0.05.
Power (80%, two-sided): ``*_mde`` the difference the item-level test of one comparison finds,
``*_mde_holm`` the same at Holm's first-step threshold (0.05 / the family size), and with 5
seeds or more ``*_seed_mde`` (``*_seed_mde_holm``) over new training runs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from .significance import (
    ALPHA,
    POWER,
    holm,
    holm_mde,
    minimum_detectable_difference,
    paired_bootstrap,
    seed_interval,
    seed_minimum_detectable_difference,
)
from .tables import SCHEMAS

BEST_INIT = "best init"
SELECT_FROM = ("all", "final")
COMPARISONS = ("vs_best_init", "vs_sparta")
MIN_SEEDS_FOR_SEED_INTERVAL = 5
"""Below this many seeds the seed-level interval is not reported (a t interval on 2-4
points is too wide to help and too sensitive to one odd run)."""


def selected_items(evaluation: pd.DataFrame, member: str, checkpoint: int, task: str) -> pd.Series:
    """Test scores per item of one member at one checkpoint on a task."""
    rows = evaluation[
        (evaluation["member"] == member)
        & (evaluation["checkpoint"] == checkpoint)
        & (evaluation["task"] == task)
        & (evaluation["split"] == "test")
    ]
    return rows.set_index("example_id")["score"].astype(float)


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


def _joined(values: dict[int, str]) -> str | None:
    return ";".join(f"{s}={v}" for s, v in sorted(values.items())) or None


def per_seed(text) -> dict[int, str]:
    """A ``*_per_seed`` / ``selected`` cell as {seed: value} (values as written)."""
    if not isinstance(text, str) or not text:
        return {}
    return {int(s): v for s, v in (part.split("=", 1) for part in text.split(";"))}


def _run_initial(r, initial: dict, evaluations: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The evaluation of a run's own initial members at checkpoint 0: ``initial`` keyed by
    run (or by seed), restricted to the run's members when the runs table lists
    them; the run's own checkpoint-0 rows when ``initial`` has neither."""
    table = initial.get(r.run, initial.get(int(r.seed), evaluations[r.run]))
    table = table[table["checkpoint"] == 0]
    members = getattr(r, "members", None)
    if members is not None and not (np.isscalar(members) and pd.isna(members)):
        table = table[table["member"].isin(list(members))]
    return table


def _diffs(mine: dict[int, pd.Series], other: dict[int, pd.Series]) -> dict[int, np.ndarray]:
    """Per seed in both: paired per-item differences on the items both have (sorted by id,
    so that a comparison and its mirror resample the same items)."""
    both = {
        s: items.index.intersection(other[s].index).sort_values() for s, items in mine.items() if s in other
    }
    return {s: (mine[s][b] - other[s][b]).to_numpy() for s, b in both.items() if len(b)}


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
    pool_of, pool_label = _initial_pools(run_list, inits, experiments)
    init_rows = list(pool_label.values())
    picks = _Picks(tasks, run_list, inits, evaluations, {e: pool_label[pool_of[e]] for e in experiments})
    picks.collect(select_from)

    reference = "sparta" if "sparta" in experiments else None
    # a pool-size experiment's own best init is its reference, compared with Sparta only as
    # Sparta's own best init is (the mirror of sparta vs best init): one comparison per pool fewer
    reference_init = pool_label[pool_of[reference]] if reference else None
    out, keys = [], []  # keys: per row and comparison, the unordered pair compared (its family key)
    seed_diffs = []  # per row and comparison, each seed's difference (the seed-level MDE)
    for task in tasks:
        for label in [*init_rows, *experiments]:
            seeds_items = picks.scores.get((task, label), {})
            if not seeds_items:
                continue
            is_init = label in init_rows
            row = _row(task, label, seeds_items, picks, is_init)
            row_keys, row_seeds = {}, {}
            for name, (other, ref) in picks.others(task, label, is_init, reference, reference_init).items():
                diffs = _diffs(seeds_items, other)
                columns, seed_means = _compared(name, diffs, replicates)
                row.update(columns)
                row_keys[name] = (task, frozenset((label, ref))) if diffs else None
                row_seeds[name] = seed_means
            out.append(row)
            keys.append(row_keys)
            seed_diffs.append(row_seeds)
    return _adjust(pd.DataFrame(out), keys, seed_diffs)


def _initial_pools(
    run_list: list, inits: dict[str, pd.DataFrame], experiments: list[str]
) -> tuple[dict[str, frozenset], dict[frozenset, str]]:
    """The initial pools (by members), one best-init row each: each experiment's pool, and each
    pool's row label; the most shared pool is "best init", the others name their experiments."""
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
    return pool_of, pool_label


@dataclasses.dataclass
class _Picks:
    """What each row compares, per (task, row label): seed -> the pick's test items
    (``scores``) and seed -> "member@checkpoint" (``chosen``); per (task, experiment): seed ->
    its run's own best init (``own_init``); per experiment, how its runs selected (``how``)."""

    tasks: list[str]
    run_list: list
    inits: dict[str, pd.DataFrame]
    evaluations: dict[str, pd.DataFrame]
    init_label: dict[str, str]  # experiment -> the row label of its initial pool
    scores: dict[tuple[str, str], dict[int, pd.Series]] = dataclasses.field(default_factory=dict)
    chosen: dict[tuple[str, str], dict[int, str]] = dataclasses.field(default_factory=dict)
    own_init: dict[tuple[str, str], dict[int, pd.Series]] = dataclasses.field(default_factory=dict)
    how: dict[str, set[str]] = dataclasses.field(default_factory=dict)

    def collect(self, select_from: str) -> None:
        for task in self.tasks:
            for r in sorted(self.run_list, key=lambda r: str(r.run)):
                self._initial(task, r)
                mode = getattr(r, "select_from", None)
                mode = select_from if mode is None or (np.isscalar(mode) and pd.isna(mode)) else str(mode)
                self.how.setdefault(r.experiment, set()).add(mode)
                pool = candidates(self.evaluations[r.run], self.inits[r.run], task, mode)
                pick = best_checkpoint(pool, task)
                if pick is not None:
                    self._add((task, r.experiment), int(r.seed), _tested(pool, pick, task, r.run), pick)

    def _initial(self, task: str, r) -> None:
        """A run's best init: its experiment's own, and its pool's row (the first run of a seed)."""
        s, init = int(r.seed), self.inits[r.run]
        first = best_checkpoint(init, task)
        if first is None:
            return
        items = _tested(init, first, task, r.run)
        self.own_init.setdefault((task, r.experiment), {})[s] = items
        label = self.init_label[r.experiment]
        if s not in self.scores.get((task, label), {}):
            self._add((task, label), s, items, first)

    def others(
        self, task: str, label: str, is_init: bool, reference: str | None, reference_init: str | None
    ) -> dict[str, tuple[dict[int, pd.Series], str | None]]:
        """Per comparison (:data:`COMPARISONS`) of a row, what it is held against: seed -> test
        items (empty: not compared), and the label of the row compared."""
        compared = reference not in (None, label) and (not is_init or label == reference_init)
        own = ({}, None) if is_init else (self.own_init.get((task, label), {}), self.init_label[label])
        return {
            "vs_best_init": own,
            "vs_sparta": (self.scores.get((task, reference), {}) if compared else {}, reference),
        }

    def _add(self, key: tuple[str, str], seed: int, items: pd.Series, pick: tuple[str, int]) -> None:
        self.scores.setdefault(key, {})[seed] = items
        self.chosen.setdefault(key, {})[seed] = f"{pick[0]}@{pick[1]}"


def _row(task: str, label: str, seeds_items: dict[int, pd.Series], picks: _Picks, is_init: bool) -> dict:
    """A row's own columns: seeds, items, the test score over seeds and per seed, the picks."""
    means = {s: float(v.mean()) for s, v in seeds_items.items()}
    return {
        "task": task,
        "experiment": label,
        "seeds": len(seeds_items),
        "items": int(np.mean([len(v) for v in seeds_items.values()])),
        "test": float(np.mean(list(means.values()))),
        "test_sd": float(np.std(list(means.values()), ddof=1)) if len(means) > 1 else float("nan"),
        "select_from": "initial" if is_init else ",".join(sorted(picks.how.get(label, ()))),
        "selected": _joined(picks.chosen[(task, label)]),
        "test_per_seed": _joined({s: f"{m:.4f}" for s, m in means.items()}),
    }


def _compared(name: str, diffs: dict[int, np.ndarray], replicates: int) -> tuple[dict, list[float]]:
    """A comparison's columns (paired bootstrap over items, the seed-level interval, the MDE)
    from each seed's paired differences, and the seeds' mean differences when there are enough
    seeds for the seed level (else none)."""
    d, low, high, p = paired_bootstrap(list(diffs.values()), replicates) if diffs else (np.nan,) * 4
    seed_means = [float(v.mean()) for v in diffs.values()]
    enough = len(seed_means) >= MIN_SEEDS_FOR_SEED_INTERVAL
    _, s_low, s_high, s_p = seed_interval(seed_means) if enough else (float("nan"),) * 4
    columns = {
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
    return columns, seed_means if enough else []


def _tested(evaluation: pd.DataFrame, pick: tuple[str, int], task: str, run: str) -> pd.Series:
    """The test items of a run's pick (its selection or its best init); a pick without test
    scores stops with what to do, rather than leaving its comparisons silently empty."""
    items = selected_items(evaluation, *pick, task)
    if len(items) == 0:
        raise ValueError(
            f"task {task}, run {run}: {pick[0]}@{pick[1]}, best on validation, has no test scores; "
            "an evaluation made with evaluation.test: selected before a pool-size experiment's own "
            "best init was tested lacks them: rerun the study (that evaluation reruns)"
        )
    return items


def _adjust(table: pd.DataFrame, keys: list[dict], seed_diffs: list[dict]) -> pd.DataFrame:
    """Holm-Bonferroni over the family of distinct comparisons in the table (a comparison
    and its mirror, e.g. Sparta vs best init and best init vs Sparta, count once); then each
    MDE at Holm's first-step threshold of its family, and the seed-level MDEs."""
    columns = SCHEMAS["comparison"].names
    if len(table) == 0:
        return pd.DataFrame(columns=columns)
    sizes = {}  # per p column, its family's size
    for suffix in ("_p", "_seed_p"):
        family: dict = {}
        for i, row_keys in enumerate(keys):
            for name, key in row_keys.items():
                p = table.at[i, f"{name}{suffix}"]
                if key is not None and not np.isnan(p):
                    family.setdefault(key, p)
        adjusted = dict(zip(family, holm(list(family.values()))))
        for name in COMPARISONS:
            table[f"{name}{suffix}_holm"] = [adjusted.get(row_keys[name], float("nan")) for row_keys in keys]
        sizes[suffix] = len(family)
    table["family_size"] = sizes["_p"]
    for name in COMPARISONS:
        table[f"{name}_significant"] = (table[f"{name}_p_holm"] < ALPHA).astype(bool)
        table[f"{name}_mde_holm"] = [holm_mde(x, sizes["_p"]) for x in table[f"{name}_mde"]]
        seeds = [row.get(name) or [] for row in seed_diffs]
        table[f"{name}_seed_mde"] = [seed_minimum_detectable_difference(x) if x else np.nan for x in seeds]
        table[f"{name}_seed_mde_holm"] = [
            seed_minimum_detectable_difference(x, ALPHA / max(sizes["_seed_p"], 1)) if x else np.nan
            for x in seeds
        ]
    return table[columns]


def _total(column: pd.Series) -> float:
    """Sum of a count column; NaN when every value is null (tables written before the column
    existed: unknown, not zero); 0 without rows."""
    return float(pd.to_numeric(column, errors="coerce").sum(min_count=1)) if len(column) else 0.0


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
    """The comparison as text, per task: test score (mean, sd over seeds) and the differences
    with their item-bootstrap intervals (``*``: Holm-adjusted p below 0.05); then each seed's
    own result, the seed-level intervals and the minimum detectable differences."""
    lines = []
    family = int(table["family_size"].max()) if "family_size" in table and len(table) else 0
    for task, g in table.groupby("task", sort=False):
        n_items, n_seeds = int(g["items"].max()), int(g["seeds"].max())
        modes = sorted({m for v in g["select_from"].dropna() for m in v.split(",")} - {"initial"})
        lines.append(f"task {task} (test items per seed: {n_items}, seeds: {n_seeds})")
        lines += [f"  selection ({m}): {SELECTION_WORDS.get(m, m)}" for m in modes]
        lines.append(f"{'experiment':<22}{'test':>16}{'vs best init':>30}{'vs sparta':>30}")
        for r in g.itertuples(index=False):
            sd = "" if np.isnan(r.test_sd) else f" ± {r.test_sd:.3f}"
            cells = [_cell(r, name) for name in COMPARISONS]
            lines.append(f"{r.experiment:<22}{r.test:>10.3f}{sd:<6}{cells[0]:>30}{cells[1]:>30}")
        lines += [
            "  brackets: 95% paired bootstrap over test items, stratified by seed (items resampled "
            "within each seed), not Holm-adjusted (only the p behind * is):",
            "  conditional on these training runs: how sure these test items make us about these "
            "runs, not what a new training run would give.",
            f"  *: Holm-adjusted p < {ALPHA:g} (exact paired sign-flip test, stratified by seed). "
            f"Holm family: {family} comparison{'s' * (family != 1)}",
            "  (each experiment vs its own best init and vs sparta, every task; a comparison and its "
            "mirror once; a pool's own best init is not compared with sparta).",
            "",
            *_per_seed_lines(g),
        ]
        if g[[f"{n}_seed_low" for n in COMPARISONS]].notna().any().any():
            lines += [
                "",
                "  seed-level 95% t interval (n - 1 df) over the seeds' differences: what a new "
                "training run would give (brackets not Holm-adjusted; * the Holm-adjusted p)",
                f"  {'experiment':<20}{'vs best init':>30}{'vs sparta':>30}",
            ]
            for r in g.itertuples(index=False):
                cells = [_cell(r, name, "_seed") for name in COMPARISONS]
                if any(cells):
                    lines.append(f"  {r.experiment:<20}{cells[0]:>30}{cells[1]:>30}")
        lines += [*_mde_lines(g, n_items, n_seeds, family), ""]
    return "\n".join(lines)


def _per_seed_lines(g: pd.DataFrame) -> list[str]:
    """Each training run's own result in one task: its selected member@checkpoint, test score
    and differences."""
    lines = ["  per seed (each training run's own result; selected member@checkpoint):"]
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
    return lines


def _mde_lines(g: pd.DataFrame, n_items: int, n_seeds: int, family: int) -> list[str]:
    """The printed minimum detectable differences of one task: per comparison the median over
    the rows (and the range), each line saying which question it answers."""

    def summary(column: str) -> str:
        values = pd.to_numeric(g[column], errors="coerce").dropna() if column in g else pd.Series(dtype=float)
        if not len(values):
            return ""
        spread = f" ({values.min():.3f} to {values.max():.3f})" if values.max() > values.min() else ""
        return f"{values.median():.3f}{spread}"

    lines = [
        "",
        f"  minimum detectable difference ({POWER:.0%} power, two-sided; median over rows, range):",
        f"  in these training runs (item-level, {n_items} test items x {n_seeds} seeds, from the variance "
        "of the paired differences)",
    ]
    step = ALPHA / max(family, 1)
    for name in COMPARISONS:
        one, first = summary(f"{name}_mde"), summary(f"{name}_mde_holm")
        if one:
            lines.append(
                f"    {name.replace('_', ' ')}: {one} alone (alpha {ALPHA:g}); {first} at Holm's first "
                f"step (alpha {ALPHA:g}/{family} = {step:.2g})"
            )
    seeded = [(name, summary(f"{name}_seed_mde"), summary(f"{name}_seed_mde_holm")) for name in COMPARISONS]
    if any(one for _, one, _ in seeded):
        lines.append(
            f"  over new training runs (seed-level t test, {n_seeds} seeds, from the variance between "
            "the seeds' differences)"
        )
        for name, one, first in seeded:
            if one:
                lines.append(f"    {name.replace('_', ' ')}: {one} alone; {first} at Holm's first step")
    elif n_seeds < MIN_SEEDS_FOR_SEED_INTERVAL:
        lines.append(
            f"  over new training runs: not estimated below {MIN_SEEDS_FOR_SEED_INTERVAL} seeds (the "
            "item-level figures leave out the variance between training runs)"
        )
    return lines
