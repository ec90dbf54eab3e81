"""The report's figures: one function per figure, tables in, a matplotlib Figure out.

Each figure reads at a glance and says so when it has nothing to show (an empty panel with
the reason) instead of failing. :func:`eq1` draws the concepts page's figure of Eq. (1) from
:mod:`sparta.reputation` (``python -m sparta.docgen --figures``).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .reputation import PoolState, ReputationSettings, begin_iteration, kappa  # noqa: E402

STYLE = {"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10}


def _subplots(*args, **kwargs):
    """``plt.subplots`` in the report's :data:`STYLE`."""
    with plt.rc_context(STYLE):
        return plt.subplots(*args, **kwargs)


def save(fig, path) -> None:
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def empty(title: str, why: str):
    """A figure that says why there is nothing to show."""
    fig, ax = _subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    return fig


def _err(y, low, high) -> np.ndarray:
    """Error-bar lengths below and above ``y`` for an interval [low, high]; never negative
    (an interval rounded just inside its estimate, or a percentile interval that leaves it
    out, draws as a zero-length bar on that side)."""
    y = np.asarray(y, dtype=float)
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    return np.clip(np.vstack([y - low, high - y]), 0, None)


def _iterations(ax, x: pd.Series, ylabel: str, title: str) -> None:
    """An axis over iterations: a tick per iteration of ``x``, the labels, the legend."""
    ax.set_xticks(sorted(x.unique()))
    ax.set(xlabel="iteration", ylabel=ylabel, title=title)
    ax.legend(fontsize=8)


def _trajectory(history: pd.DataFrame, member: str):
    """(duel step, reputation, deviation) of one member along the history, step 0 = start."""
    points = []
    for i, h in enumerate(history.itertuples(index=False), start=1):
        for side in ("a", "b"):
            if getattr(h, f"member_{side}") != member:
                continue
            if not points:
                points.append(
                    (0, getattr(h, f"reputation_{side}_before"), getattr(h, f"deviation_{side}_before"))
                )
            points.append((i, getattr(h, f"reputation_{side}_after"), getattr(h, f"deviation_{side}_after")))
    if points:
        points.append((len(history), *points[-1][1:]))
    steps, rep, dev = zip(*points) if points else ((), (), ())
    return np.array(steps), np.array(rep, dtype=float), np.array(dev, dtype=float)


def members_of(history: pd.DataFrame) -> list[str]:
    return sorted(set(history["member_a"]) | set(history["member_b"]))


def reputation(history: pd.DataFrame):
    """Reputation trajectories with deviation bands (top) and the deviations (bottom)."""
    if len(history) == 0:
        return empty("Reputation", "no duel has been settled")
    fig, (ax, axd) = _subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    bands = []
    for m in members_of(history):
        s, r, d = _trajectory(history, m)
        if not len(s):
            continue
        (line,) = ax.step(s, r, where="post", label=m, lw=1.8)
        bands.append((s, r, d, line.get_color()))
        axd.step(s, d, where="post", color=line.get_color(), lw=1.4)
    low, high = min(r.min() for _, r, *_ in bands), max(r.max() for _, r, *_ in bands)
    span = max(high - low, 1e-3)
    ax.set_ylim(low - 0.25 * span, high + 0.25 * span)
    # a band much wider than the moves would cover the plot and hide them: then only the
    # lower panel shows the deviations
    drawn = bool(bands) and max(float(np.median(d)) for *_, d, _ in bands) <= 2 * span
    for s, r, d, color in bands if drawn else ():
        ax.fill_between(s, r - d, r + d, step="post", alpha=0.08, color=color)
    for _, g in history.reset_index().groupby("iteration"):
        for a in (ax, axd):
            a.axvline(g["index"].max() + 1, color="grey", ls=":", lw=1)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_ylabel("reputation (band: +/- deviation)" if drawn else "reputation (deviations: below)")
    ax.set_title("Reputation of each member (dotted lines end an iteration)")
    ax.legend(loc="best", fontsize=8)
    axd.set(xlabel="duel (play order)", ylabel="deviation")
    return fig


def win_matrix(history: pd.DataFrame) -> pd.DataFrame:
    """Wins of the row member over the column member, over duels with a verdict."""
    members = members_of(history)
    wins = pd.DataFrame(0, index=members, columns=members)
    for h in history.itertuples(index=False):
        if h.outcome == "a":
            wins.loc[h.member_a, h.member_b] += 1
        elif h.outcome == "b":
            wins.loc[h.member_b, h.member_a] += 1
    return wins


def wins(history: pd.DataFrame):
    if len(history) == 0:
        return empty("Wins", "no duel has been settled")
    table = win_matrix(history)
    members = list(table.index)
    fig, ax = _subplots(figsize=(1.2 * len(members) + 2, 1.0 * len(members) + 1.5))
    im = ax.imshow(table.to_numpy(), cmap="Blues")
    ax.set_xticks(range(len(members)), members, rotation=30, ha="right")
    ax.set_yticks(range(len(members)), members)
    for (i, j), count in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, int(count), ha="center", va="center", color="black")
    ax.set(xlabel="loser", ylabel="winner", title="Wins (row beat column)")
    ax.grid(False)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return fig


def judge_scores(judgments: pd.DataFrame):
    """Histogram of the scores each judge gave."""
    usable = judgments.dropna(subset=["score"])
    if len(usable) == 0:
        return empty("Scores given by each judge", "no usable judgment")
    judges = sorted(usable["judge"].unique())
    fig, axes = _subplots(1, len(judges), figsize=(3 * len(judges), 3), sharey=True, squeeze=False)
    for ax, j in zip(axes[0], judges):
        ax.hist(usable.loc[usable["judge"] == j, "score"], bins=np.arange(1, 10.5, 0.5), color="C0")
        ax.set(title=f"judge {j}", xlabel="score (1-10)")
    axes[0][0].set_ylabel("judgments")
    fig.suptitle("Scores given by each judge", y=1.04)
    return fig


def label_accuracy(label: pd.DataFrame, judges: pd.DataFrame | None = None):
    """Label accuracy of the collective (with its 95% interval) and of each judge, per
    iteration (``judges``: the per-judge table, analysis/judge_label_accuracy.parquet)."""
    if judges is not None and len(judges):
        label = pd.concat([label, judges], ignore_index=True) if len(label) else judges
    it = label[label["scope"] == "iteration"] if len(label) else label
    if len(it) == 0:
        return empty("Label accuracy", "no ground truth, or no pair with exactly one right answer")
    fig, ax = _subplots(figsize=(6.5, 4))
    x, y = it["iteration"].astype(int), it["accuracy"].astype(float)
    err = _err(y, it["accuracy_low"], it["accuracy_high"])
    ax.errorbar(x, y, yerr=err, fmt="o-", lw=2.5, color="black", capsize=4, label="collective (95% CI)")
    for n, acc, c in zip(x, y, it["informative"]):
        ax.annotate(f"n={c}", (n, acc), textcoords="offset points", xytext=(4, 6), fontsize=8)
    for j, g in label[label["scope"] == "iteration x judge"].groupby("judge"):
        ax.plot(g["iteration"].astype(int), g["accuracy"], ".--", alpha=0.7, label=f"judge {j} (alone)")
    ax.axhline(0.5, color="grey", ls=":", label="chance")
    ax.set_ylim(-0.05, 1.05)
    _iterations(ax, x, "label accuracy (informative pairs)", "Do the judges prefer the right answer?")
    return fig


def diversity(div: pd.DataFrame):
    """Mean distance between the two answers of a duel, per iteration."""
    if len(div) == 0:
        return empty("Response diversity", "no duel with two answers")
    fig, ax = _subplots(figsize=(6.5, 4))
    names = (("edit", "edit distance"), ("one_minus_bleu", "1 - BLEU"), ("embedding", "embedding distance"))
    for col, name in names:
        if col in div and div[col].notna().any():
            ax.plot(div["iteration"], div[col], "o-", label=name)
    ax.set_ylim(bottom=0)
    _iterations(ax, div["iteration"], "mean distance between the two answers of a duel", "Response diversity")
    return fig


def reward_hacking(table: pd.DataFrame):
    """Share of chosen and rejected answers flagged by the attack-family classifier (any
    family; the table has each family's counts too)."""
    if "family" in table.columns:
        table = table[table["family"] == "any"]
    if len(table) == 0:
        return empty("Reward hacking", "no preference pairs")
    fig, ax = _subplots(figsize=(6.5, 4))
    x = table["iteration"].astype(int)
    for side, style in (("chosen", "o-"), ("rejected", "s--")):
        y = table[f"{side}_share"].astype(float)
        err = _err(y, table[f"{side}_share_low"], table[f"{side}_share_high"])
        ax.errorbar(x, y, yerr=err, fmt=style, capsize=4, label=f"{side} answers (95% CI)")
    for n, c in zip(x, table["pairs"]):
        ax.annotate(f"n={c}", (n, 0), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    _iterations(ax, x, "share flagged by an attack family", "Are the members learning to talk to the judges?")
    return fig


def training(log: pd.DataFrame, held_out: pd.DataFrame):
    """Did DPO do anything? Left: DPO reward accuracy on the training pairs, per member and
    iteration (mean over the logged steps); middle: the reward margin, on its own axis (it
    lives near 0, accuracy near 0.5). Right: held-out preference accuracy of each member
    before and after its DPO (the next iteration's pairs, 95% CI)."""
    dpo = log[(log["stage"] == "dpo") & log["loss"].notna()] if len(log) else log
    if len(dpo) == 0 and len(held_out) == 0:
        return empty("Training", "no DPO step logged (no preference pairs)")
    fig, (ax, axm, axh) = _subplots(
        1, 3, figsize=(16, 4), gridspec_kw={"width_ratios": [1, 1, 1.3]}, layout="constrained"
    )
    if len(dpo):
        columns = ["rewards_accuracies", "rewards_margins"]
        means = dpo.groupby(["member", "iteration"])[columns].mean().reset_index()
        for m, g in means.groupby("member"):
            (line,) = ax.plot(g["iteration"], g["rewards_accuracies"], "o-", label=m)
            axm.plot(g["iteration"], g["rewards_margins"], "s-", color=line.get_color(), label=m)
        for a in (ax, axm):
            a.set_xticks(sorted(means["iteration"].unique()))
    ax.axhline(0.5, color="grey", ls=":", lw=1)
    axm.axhline(0.0, color="grey", ls=":", lw=1)
    for a in (ax, axm):
        a.set_xlabel("iteration")
        a.legend(fontsize=7)
    ax.set(ylabel="DPO reward accuracy (training pairs)", title="DPO: chosen rewarded above rejected")
    axm.set(ylabel="DPO reward margin (chosen - rejected)", title="DPO: reward margin")
    if len(held_out):
        members = sorted(held_out["member"].unique())
        iterations = sorted(held_out["iteration"].unique())  # one before/after pair per DPO
        bars = [(i, when) for i in iterations for when in ("before", "after")]
        width = 0.8 / len(bars)
        for k, (i, when) in enumerate(bars):
            sel = (held_out["iteration"] == i) & (held_out["when"] == when)
            h = held_out[sel].set_index("member").reindex(members)
            x = np.arange(len(members)) + (k - (len(bars) - 1) / 2) * width
            y = h["accuracy"].to_numpy(dtype=float)
            err = _err(y, h["accuracy_low"], h["accuracy_high"])
            label = f"{when} its DPO" if len(iterations) == 1 else f"iteration {i}: {when} its DPO"
            axh.bar(x, y, width, yerr=err, capsize=2, label=label)
        axh.set_xticks(range(len(members)), members, rotation=20)
        n = sorted({int(v) for v in held_out["pairs"]})
        n_text = str(n[0]) if len(n) == 1 else f"{n[0]}-{n[-1]}"
        axh.set_title(f"Held-out pairs (next iteration, n = {n_text} per member)")
    else:
        axh.text(0.5, 0.5, "one iteration only: no next iteration's pairs", ha="center", va="center")
        axh.set_title("Held-out pairs")
    axh.axhline(0.5, color="grey", ls=":", lw=1)
    axh.set(ylim=(0, 1.05), ylabel="chosen likelier than rejected (share)")
    axh.legend(fontsize=8)
    return fig


def evaluation(scores: pd.DataFrame | None):
    """Validation score of every member at every checkpoint, one panel per task."""
    if scores is None:
        return empty("Evaluation", "evaluation is off (evaluation.enabled: false)")
    val = scores[scores["split"] == "validation"]
    tasks = sorted(val["task"].unique())
    if not tasks:
        return empty("Evaluation", "no validation scores")
    fig, axes = _subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for m, g in val[val["task"] == task].groupby("member"):
            g = g.sort_values("checkpoint")
            ax.plot(g["checkpoint"], g["score"], "o-", label=m)
        metric = val.loc[val["task"] == task, "metric"].iloc[0]
        ax.set_xticks(sorted(val["checkpoint"].unique()))
        ax.set(xlabel="checkpoint (0 = initial pool)", ylabel=f"validation {metric}", title=task)
        ax.legend(fontsize=8)
    return fig


def comparison(table: pd.DataFrame, cost: pd.DataFrame):
    """The study at a glance. Left: per task, each experiment's test score minus best init's,
    with its paired bootstrap 95% interval (filled: significant at 0.05). Right: inference per
    iteration of each experiment (tokens generated and tokens judges read, mean over seeds)."""
    if len(table) == 0:
        return empty("Comparison", "no experiment has a best-on-validation member to compare")
    tasks = list(dict.fromkeys(table["task"]))
    fig, axes = _subplots(1, len(tasks) + 1, figsize=(5.5 * (len(tasks) + 1), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = table[table["task"] == task]
        g = rows[rows["vs_best_init"].notna()].reset_index(drop=True)
        y = np.arange(len(g))
        d = g["vs_best_init"].to_numpy(float)
        err = _err(d, g["vs_best_init_low"], g["vs_best_init_high"])
        for k, sig in enumerate(g["vs_best_init_significant"].astype(bool)):
            fill = None if sig else "white"
            ax.errorbar(d[k], y[k], xerr=err[:, k : k + 1], fmt="o", mfc=fill, capsize=4, color="C0")
        ax.axvline(0, color="grey", ls=":", lw=1)
        ax.set_yticks(y, [f"{e} ({t:.3f})" for e, t in zip(g["experiment"], g["test"])])
        ax.invert_yaxis()
        n, s = int(rows["items"].max()), int(rows["seeds"].max())
        ax.set_xlabel("test score minus best init (95% paired bootstrap)")
        ax.set_title(f"{task}: {n} test items x {s} seeds (filled: p < 0.05)", fontsize=9)
    ax = axes[0][-1]
    if len(cost):
        per = cost.groupby("experiment", sort=False)[["tokens_generated", "tokens_judged"]].mean()
        y = np.arange(len(per))
        ax.barh(y - 0.2, per["tokens_generated"], 0.4, label="tokens generated")
        ax.barh(y + 0.2, per["tokens_judged"], 0.4, label="tokens judges read")
        ax.set_yticks(y, list(per.index))
        ax.invert_yaxis()
        ax.set_xlabel("per iteration (mean over iterations and seeds)")
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no answers or judgments recorded", ha="center", va="center")
    ax.set_title("Inference spent")
    fig.tight_layout()  # the right panel's experiment names clear the left panel
    return fig


def eq1(path: Path) -> Path:
    """Eq. (1)'s three factors and the down-weighting schedule, computed by the code that
    runs them (:mod:`sparta.reputation`), as an SVG."""
    matplotlib.rcParams.update({"svg.hashsalt": "sparta", "font.size": 9})
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.4), constrained_layout=True)
    for ax, panel in zip(axes.flat, (_surprise_panel, _deviation_panel, _kappa_panel, _downweighting_panel)):
        panel(ax)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return path


def _surprise_panel(ax) -> None:
    """(a) the surprise term against the reputation difference, for several deviations."""
    sparta = ReputationSettings()
    diff = np.linspace(-3, 3, 601)
    for s in (0.1, 0.5, 1.0, 2.0):
        z = diff / math.sqrt(2 * s * s)
        term = np.maximum(np.abs([math.erf(v / math.sqrt(2)) for v in z]), sparta.eps)
        ax.plot(diff, term, label=f"$\\sigma_i = \\sigma_{{i'}} = {s}$")
    ax.set(
        xlabel="$R_i - R_{i'}$",
        ylabel="$\\max(|\\Phi(z_i) - \\Phi(z_{i'})|, \\epsilon)$",
        title="(a) reputation difference term ($\\epsilon$ = 0.01)",
    )
    ax.legend(frameon=False)


def _deviation_panel(ax) -> None:
    """(b) tanh of the deviation."""
    sparta = ReputationSettings()
    sigma = np.linspace(0, 3, 301)
    ax.plot(sigma, np.tanh(np.maximum(sigma, sparta.sigma_min)))
    ax.axvline(sparta.sigma_min, color="grey", lw=0.8, ls=":")
    ax.axvline(sparta.initial_deviation, color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel="$\\sigma_i$ (std of the last N changes)",
        ylabel="$\\tanh(\\max(\\sigma_i, \\sigma_{min}))$",
        title="(b) deviation term ($\\sigma_{min}$ dotted, initial $\\sigma$ dashed)",
    )


def _kappa_panel(ax) -> None:
    """(c) kappa over the duels of an iteration, per preset."""
    n = np.arange(1, 201)
    for name in ("sparta", "paper"):
        params = ReputationSettings.preset(name)
        ax.plot(n, [kappa(int(k), params) / params.scale for k in n], label=f"preset {name}")
    ax.set(
        xlabel="n, verdicts so far in the iteration",
        ylabel="$\\kappa_n$ / scale",
        title="(c) step size: $\\kappa_n = \\max(K_{min}, K_0 \\cdot decay^{n / steps})$",
        ylim=(0, 1.1),
    )
    ax.legend(frameon=False)


def _downweighting_panel(ax) -> None:
    """(d) down-weighting of 10 members over 8 iterations: who gets which weight from when."""
    members = [f"m{k}" for k in range(10)]
    for name, style, marker, shift in (("sparta", "-", "o", 0.0), ("authors", "--", "s", 0.015)):
        params = ReputationSettings.preset(name)
        state = PoolState.initial(members, params)
        state.reputation = [100.0 + k for k in range(10)]  # m0 lowest, m9 highest
        for t in range(1, 9):
            begin_iteration(state, t, params)
        for k, start in enumerate(state.downweighted_at):
            if start is not None:
                y = state.weight[k] + shift
                ax.plot([start, 8.5], [y, y], ls=style, color=f"C{k}", lw=1.2)
                ax.plot([start], [y], marker=marker, color=f"C{k}", ms=4)
        ax.plot([], [], ls=style, marker=marker, color="black", ms=4, label=f"preset {name}")
    ax.set(
        xlabel="iteration t from which the member has the weight",
        ylabel="weight (other members: 1)",
        title="(d) down-weighting (appendix C.1), m = 10, T = 8",
        xticks=range(1, 9),
        xlim=(0.8, 8.6),
    )
    ax.legend(frameon=False, loc="upper left")
