"""rule plots: the report's figures (PNG), readable at a glance."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sparta import tables  # noqa: E402
from sparta.logs import setup  # noqa: E402

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
out = sm.output
history = pd.read_parquet(sm.input.history)
analysis = {
    name: pd.read_parquet(path)
    for name, path in zip(
        ("diversity", "lengths", "label_accuracy", "judge_accuracy", "correlation", "standings"), sm.input[:6]
    )
}
plt.rcParams.update({"figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3, "font.size": 10})


def empty(path, title, why):
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


# 1. reputation trajectories with deviation bands (top) and the deviations (bottom)
members = sorted(set(history["model_a"]) | set(history["model_b"]))
fig, (ax, axd) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
lows, highs = [], []
for m in members:
    steps, rep, dev = [], [], []
    for i, h in enumerate(history.itertuples(index=False), start=1):
        if h.model_a == m:
            if not steps:
                steps.append(0), rep.append(h.reputation_a_before), dev.append(h.deviation_a_before)
            steps.append(i), rep.append(h.reputation_a_after), dev.append(h.deviation_a_after)
        elif h.model_b == m:
            if not steps:
                steps.append(0), rep.append(h.reputation_b_before), dev.append(h.deviation_b_before)
            steps.append(i), rep.append(h.reputation_b_after), dev.append(h.deviation_b_after)
    if not steps:
        continue
    steps.append(len(history)), rep.append(rep[-1]), dev.append(dev[-1])
    s, r, d = np.array(steps), np.array(rep, dtype=float), np.array(dev, dtype=float)
    (line,) = ax.step(s, r, where="post", label=m, lw=1.8)
    ax.fill_between(s, r - d, r + d, step="post", alpha=0.08, color=line.get_color())
    axd.step(s, d, where="post", color=line.get_color(), lw=1.4)
    lows.append(r.min()), highs.append(r.max())
if lows:
    span = max(max(highs) - min(lows), 1e-3)
    ax.set_ylim(min(lows) - 0.25 * span, max(highs) + 0.25 * span)  # bands wider than this are clipped
for _, g in history.reset_index().groupby("iteration"):
    for a in (ax, axd):
        a.axvline(g["index"].max() + 1, color="grey", ls=":", lw=1)
ax.ticklabel_format(axis="y", useOffset=False)
ax.set_ylabel("reputation (band: +/- deviation)")
ax.set_title("Reputation of each member (dotted lines end an iteration)")
ax.legend(loc="best", fontsize=8)
axd.set_ylabel("deviation")
axd.set_xlabel("duel (play order)")
fig.savefig(out.reputation, bbox_inches="tight")
plt.close(fig)

# 2. win matrix
wins = pd.DataFrame(0, index=members, columns=members)
for h in history.itertuples(index=False):
    if h.outcome == "a":
        wins.loc[h.model_a, h.model_b] += 1
    elif h.outcome == "b":
        wins.loc[h.model_b, h.model_a] += 1
fig, ax = plt.subplots(figsize=(1.2 * len(members) + 2, 1.0 * len(members) + 1.5))
im = ax.imshow(wins.to_numpy(), cmap="Blues")
ax.set_xticks(range(len(members)), members, rotation=30, ha="right")
ax.set_yticks(range(len(members)), members)
for i in range(len(members)):
    for j in range(len(members)):
        ax.text(j, i, int(wins.iloc[i, j]), ha="center", va="center", color="black")
ax.set_xlabel("loser")
ax.set_ylabel("winner")
ax.set_title("Wins (row beat column)")
ax.grid(False)
fig.colorbar(im, ax=ax, fraction=0.046)
fig.savefig(out.wins, bbox_inches="tight")
plt.close(fig)

# 3. score histogram per judge
judgments = tables.read_many(sm.input.judgments, "judgments").dropna(subset=["score"])
if len(judgments):
    judges = sorted(judgments["judge"].unique())
    fig, axes = plt.subplots(1, len(judges), figsize=(3 * len(judges), 3), sharey=True, squeeze=False)
    for ax, j in zip(axes[0], judges):
        ax.hist(judgments.loc[judgments["judge"] == j, "score"], bins=np.arange(1, 10.5, 0.5), color="C0")
        ax.set_title(f"judge {j}")
        ax.set_xlabel("score (1-10)")
    axes[0][0].set_ylabel("judgments")
    fig.suptitle("Scores given by each judge", y=1.04)
    fig.savefig(out.scores, bbox_inches="tight")
    plt.close(fig)
else:
    empty(out.scores, "Scores given by each judge", "no usable judgment")

# 4. label accuracy over iterations
label, per_judge = analysis["label_accuracy"], analysis["judge_accuracy"]
if len(label) and (label["scope"] == "iteration").any():
    fig, ax = plt.subplots(figsize=(6.5, 4))
    it = label[label["scope"] == "iteration"]
    ax.plot(it["iteration"], it["accuracy"], "o-", lw=2.5, color="black", label="collective (pairs)")
    for n, c in zip(it["iteration"], it["informative"]):
        ax.annotate(
            f"n={c}",
            (n, it.loc[it["iteration"] == n, "accuracy"].iloc[0]),
            textcoords="offset points",
            xytext=(4, 6),
            fontsize=8,
        )
    if len(per_judge):
        pj = per_judge[per_judge["scope"] == "iteration x judge"]
        for j, g in pj.groupby("judge"):
            ax.plot(g["iteration"], g["accuracy"], ".--", alpha=0.7, label=f"judge {j}")
    ax.axhline(0.5, color="grey", ls=":", label="chance")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xticks(sorted(it["iteration"].unique()))
    ax.set_xlabel("iteration")
    ax.set_ylabel("label accuracy (informative pairs)")
    ax.set_title("Do the judges prefer the right answer?")
    ax.legend(fontsize=8)
    fig.savefig(out.label_accuracy, bbox_inches="tight")
    plt.close(fig)
else:
    empty(out.label_accuracy, "Label accuracy", "no ground truth, or no pair with exactly one right answer")

# 5. diversity over iterations
div = analysis["diversity"]
if len(div):
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for col, name in (
        ("edit", "edit distance"),
        ("one_minus_bleu", "1 - BLEU"),
        ("embedding", "embedding distance"),
    ):
        if col in div:
            ax.plot(div["iteration"], div[col], "o-", label=name)
    ax.set_xticks(sorted(div["iteration"].unique()))
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean distance between the two answers of a duel")
    ax.set_ylim(bottom=0)
    ax.set_title("Response diversity")
    ax.legend(fontsize=8)
    fig.savefig(out.diversity, bbox_inches="tight")
    plt.close(fig)
else:
    empty(out.diversity, "Response diversity", "no duel with two answers")

# 6. evaluation curves per member
if sm.input.evaluation:
    scores = pd.read_parquet(sm.input.evaluation)
    val = scores[scores["split"] == "validation"]
    tasks = sorted(val["task"].unique())
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for m, g in val[val["task"] == task].groupby("member"):
            g = g.sort_values("checkpoint")
            ax.plot(g["checkpoint"], g["score"], "o-", label=m)
        metric = val.loc[val["task"] == task, "metric"].iloc[0]
        ax.set_xticks(sorted(val["checkpoint"].unique()))
        ax.set_xlabel("checkpoint (0 = initial pool)")
        ax.set_ylabel(f"validation {metric}")
        ax.set_title(task)
        ax.legend(fontsize=8)
    fig.savefig(out.evaluation, bbox_inches="tight")
    plt.close(fig)
else:
    empty(out.evaluation, "Evaluation", "evaluation is off (evaluation.enabled: false)")
log.info("wrote %d figures", len(out))
