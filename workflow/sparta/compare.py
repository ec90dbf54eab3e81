"""The paper's comparison (its Table 1) for a study, with uncertainty (pure).

Per task and experiment: the member that is best on validation among the final members
(``best final`` of the experiment's selection) is scored on the test split, for every seed;
``best init`` is the best initial member on validation, on test. Every difference (to best
init and to Sparta) carries a paired bootstrap 95% interval over test items, and over seeds
when there are several (seeds resampled, then items within each), and is marked significant
at 0.05 when the interval leaves out zero, as the paper's asterisks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BEST_INIT = "best init"


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


def paired_bootstrap(
    diffs_by_seed: list[np.ndarray], replicates: int = 10_000, seed: int = 0
) -> tuple[float, float, float, float]:
    """(mean difference, 95% interval low, high, two-sided p) of paired per-item differences
    (one array per seed): seeds resampled when there are several, items within each."""
    rng = np.random.default_rng(seed)
    diffs_by_seed = [np.asarray(d, dtype=float) for d in diffs_by_seed if len(d)]
    if not diffs_by_seed:
        return (float("nan"),) * 4
    observed = float(np.mean(np.concatenate(diffs_by_seed)))
    means = np.empty(replicates)
    for b in range(replicates):
        seeds = rng.integers(0, len(diffs_by_seed), len(diffs_by_seed)) if len(diffs_by_seed) > 1 else [0]
        sampled = [d[rng.integers(0, len(d), len(d))] for d in (diffs_by_seed[s] for s in seeds)]
        means[b] = np.mean(np.concatenate(sampled))
    low, high = np.percentile(means, [2.5, 97.5])
    p = min(1.0, 2 * min(np.mean(means <= 0), np.mean(means >= 0)))
    return observed, float(low), float(high), float(p)


def comparison(
    runs: pd.DataFrame,
    evaluations: dict[str, pd.DataFrame],
    selections: dict[str, pd.DataFrame],
    initial: dict[int, pd.DataFrame],
    replicates: int = 10_000,
) -> pd.DataFrame:
    """The comparison table. ``runs``: one row per run (run, experiment, seed);
    ``evaluations`` / ``selections``: per run; ``initial``: per seed, the initial pool's
    evaluation (checkpoint 0). One row per (task, experiment)."""
    tasks = sorted({t for sel in selections.values() for t in sel["task"]})
    seeds = sorted(runs["seed"].unique())
    scores: dict[tuple[str, str], dict[int, pd.Series]] = {}  # (task, experiment) -> seed -> items
    for task in tasks:
        for s in seeds:
            init = initial[s]
            member = best_on_validation(init, task, 0)
            scores.setdefault((task, BEST_INIT), {})[s] = selected_items(init, member, 0, task)
        for r in runs.itertuples(index=False):
            sel = selections[r.run]
            row = sel[(sel["task"] == task) & (sel["stage"] == "best final")]
            if len(row):
                m, c = row["member"].iloc[0], int(row["checkpoint"].iloc[0])
                scores.setdefault((task, r.experiment), {})[int(r.seed)] = selected_items(
                    evaluations[r.run], m, c, task
                )
    experiments = [BEST_INIT, *dict.fromkeys(runs["experiment"])]
    reference = "sparta" if "sparta" in experiments else None
    out = []
    for task in tasks:
        for exp in experiments:
            per_seed = scores.get((task, exp), {})
            if not per_seed:
                continue
            means = [float(v.mean()) for v in per_seed.values()]
            row = {
                "task": task,
                "experiment": exp,
                "seeds": len(per_seed),
                "items": int(np.mean([len(v) for v in per_seed.values()])),
                "test": float(np.mean(means)),
                "test_sd": float(np.std(means, ddof=1)) if len(means) > 1 else float("nan"),
            }
            for name, ref in (("vs_best_init", BEST_INIT), ("vs_sparta", reference)):
                diffs = []
                if ref is not None and ref != exp:
                    other = scores.get((task, ref), {})
                    for s, items in per_seed.items():
                        if s in other:
                            both = items.index.intersection(other[s].index)
                            diffs.append((items[both] - other[s][both]).to_numpy())
                d, low, high, p = paired_bootstrap(diffs, replicates) if diffs else (float("nan"),) * 4
                row.update(
                    {
                        name: d,
                        f"{name}_low": low,
                        f"{name}_high": high,
                        f"{name}_p": p,
                        f"{name}_significant": bool(p < 0.05) if diffs else False,
                    }
                )
            out.append(row)
    return pd.DataFrame(out)


def cost(
    runs: pd.DataFrame, responses: dict[str, pd.DataFrame], judgments: dict[str, pd.DataFrame]
) -> pd.DataFrame:
    """Inference per experiment and iteration (mean over seeds): answers generated and their
    tokens, judgments and the prompt tokens judges read."""
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
                    "tokens_judged": int(j["prompt_tokens"].fillna(0).sum()),
                }
            )
    per_seed = pd.DataFrame(rows)
    if len(per_seed) == 0:
        return per_seed
    return (
        per_seed.groupby(["experiment", "iteration"], as_index=False, sort=False)
        .mean(numeric_only=True)
        .drop(columns="seed")
    )


def format_table(table: pd.DataFrame) -> str:
    """The comparison as text: test score (mean, sd over seeds) and the differences with their
    intervals; * marks a difference significant at 0.05."""
    lines = []
    for task, g in table.groupby("task", sort=False):
        lines.append(
            f"task {task} (test items per seed: {int(g['items'].max())}, seeds: {int(g['seeds'].max())})"
        )
        lines.append(f"{'experiment':<22}{'test':>16}{'vs best init':>30}{'vs sparta':>30}")
        for r in g.itertuples(index=False):
            sd = "" if np.isnan(r.test_sd) else f" ± {r.test_sd:.3f}"
            cells = []
            for name in ("vs_best_init", "vs_sparta"):
                d = getattr(r, name)
                if np.isnan(d):
                    cells.append("")
                    continue
                star = "*" if getattr(r, f"{name}_significant") else " "
                cells.append(
                    f"{d:+.3f} [{getattr(r, f'{name}_low'):+.3f}, {getattr(r, f'{name}_high'):+.3f}]{star}"
                )
            lines.append(f"{r.experiment:<22}{r.test:>10.3f}{sd:<6}{cells[0]:>30}{cells[1]:>30}")
        lines.append("")
    return "\n".join(lines)
