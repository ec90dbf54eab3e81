"""The paper's analyses over a run's tables (pure; the embedding model is passed in).

- response diversity per iteration: normalised edit distance, 1 - BLEU, embedding distance
  between the two answers of each duel (paper section 5, Table 2);
- length of chosen against rejected answers;
- reputation against validation performance (Pearson r, paper Figure 5);
- label accuracy of the collective and of each judge where ground truth exists;
- the judging itself: per member and kind, unusable, failed and shortened judgments and the
  pairs made of them.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pandas as pd
from scipy.stats import pearsonr

from . import metrics, tables
from .judging import FAMILIES, attack_families


def edit_distance(a: list, b: list) -> int:
    """Levenshtein distance between two sequences."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def normalized_edit_distance(a: str, b: str) -> float:
    """Word-level Levenshtein distance divided by the longer length (0 same, 1 disjoint)."""
    wa, wb = a.split(), b.split()
    return edit_distance(wa, wb) / max(len(wa), len(wb)) if wa or wb else 0.0


def bleu(candidate: str, reference: str, max_n: int = 4) -> float:
    """Sentence BLEU with add-one smoothing of the n-gram precisions (Lin & Och 2004)."""
    c, r = candidate.split(), reference.split()
    if not c or not r:
        return 0.0
    logs = []
    for n in range(1, max_n + 1):
        cg = Counter(tuple(c[i : i + n]) for i in range(len(c) - n + 1))
        rg = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
        match = sum(min(k, rg[g]) for g, k in cg.items())
        total = max(len(c) - n + 1, 0)
        logs.append(math.log((match + 1) / (total + 1)) if n > 1 else math.log(max(match, 1e-9) / total))
    brevity = min(0.0, 1 - len(r) / len(c))
    return math.exp(brevity + sum(logs) / max_n)


def pair_diversity(responses: pd.DataFrame, duels: pd.DataFrame, embed=None) -> pd.DataFrame:
    """Diversity of the two answers of every duel (a baseline's: a member's first two answers
    to a prompt): one row per duel."""
    text = {(r.duel_id, r.member, int(r.sample)): r.response for r in responses.itertuples(index=False)}
    rows = []
    for d in duels.itertuples(index=False):
        second = (d.duel_id, d.member_b, 1 if d.member_a == d.member_b else 0)
        a, b = text.get((d.duel_id, d.member_a, 0)), text.get(second)
        if a is None or b is None:
            continue
        rows.append(
            (d.iteration, d.duel_id, normalized_edit_distance(a, b), 1 - (bleu(a, b) + bleu(b, a)) / 2, a, b)
        )
    out = pd.DataFrame(rows, columns=["iteration", "duel_id", "edit", "one_minus_bleu", "a", "b"])
    if embed is not None and len(out):
        va, vb = embed(out["a"].tolist()), embed(out["b"].tolist())
        out["embedding"] = 1 - (va * vb).sum(1)  # vectors are L2-normalised
    return out.drop(columns=["a", "b"])


def diversity_by_iteration(per_duel: pd.DataFrame) -> pd.DataFrame:
    if len(per_duel) == 0:
        return pd.DataFrame(columns=["iteration", "edit", "one_minus_bleu", "embedding", "duels"])
    cols = [c for c in ("edit", "one_minus_bleu", "embedding") if c in per_duel]
    return (
        per_duel.groupby("iteration")[cols]
        .mean()
        .reset_index()
        .assign(duels=per_duel.groupby("iteration").size().to_numpy())
    )


def lengths(prefs: pd.DataFrame) -> pd.DataFrame:
    """Mean words of chosen and rejected answers per iteration."""
    df = prefs.assign(
        chosen_words=prefs["chosen"].str.split().str.len(),
        rejected_words=prefs["rejected"].str.split().str.len(),
    )
    return df.groupby("iteration")[["chosen_words", "rejected_words"]].mean().reset_index()


def pair_counts(method, duels, responses, judgments, history, prefs, *, baselines) -> pd.DataFrame:
    """Per iteration: the preference pairs the members train on, and the pairs dropped because
    their chosen and rejected answers are the same text (DPO would learn nothing from them).
    Sparta's from its duel history (a decided duel of two equal answers); a baseline's by
    making each round's pairs again (:meth:`Method.kept_pairs`, deterministic: its caps and
    choices are seeded)."""
    rows = []
    for t in sorted(int(x) for x in duels["iteration"].unique()):
        if len(history):
            decided = history[(history["iteration"] == t) & history["outcome"].isin(["a", "b"])]
            text = dict(zip(zip(responses["duel_id"], responses["member"]), responses["response"]))
            identical = sum(
                text.get((d, a)) == text.get((d, b))
                for d, a, b in zip(decided["duel_id"], decided["member_a"], decided["member_b"])
            )
        else:
            identical = 0
            for _, round_duels in duels[duels["iteration"] == t].groupby("round"):
                ids = set(round_duels["duel_id"])
                identical += method.kept_pairs(
                    round_duels,
                    responses[responses["duel_id"].isin(ids)],
                    judgments[judgments["duel_id"].isin(ids)],
                    baselines,
                )[1]
        rows.append(
            {"iteration": t, "pairs": int((prefs["iteration"] == t).sum()), "identical": int(identical)}
        )
    return tables.frame(rows, "pairs")


def judge_label_accuracy(
    judgments: pd.DataFrame, duels: pd.DataFrame, responses: pd.DataFrame, kind: str = "number"
) -> pd.DataFrame:
    """Per judge: on duels where exactly one answer is right, how often the judge scored the
    right one higher (ties count as neither)."""
    right = {
        (r.duel_id, r.member): metrics.exact_match(r.response, ans, kind)
        for r, ans in zip(
            responses.itertuples(index=False), responses["duel_id"].map(duels.set_index("duel_id")["answer"])
        )
        if ans is not None and not pd.isna(ans)
    }
    iteration = duels.set_index("duel_id")["iteration"]
    rows = []
    scores = judgments.dropna(subset=["score"]).set_index(["duel_id", "judge", "target"])["score"]
    for d in duels.itertuples(index=False):
        ra, rb = right.get((d.duel_id, d.member_a)), right.get((d.duel_id, d.member_b))
        if ra is None or rb is None or ra == rb:
            continue
        for judge in judgments.loc[judgments["duel_id"] == d.duel_id, "judge"].unique():
            sa, sb = scores.get((d.duel_id, judge, d.member_a)), scores.get((d.duel_id, judge, d.member_b))
            if sa is None or sb is None or sa == sb:
                continue
            ok = (sa > sb) == ra
            rows.append(
                {"iteration": iteration[d.duel_id], "judge": judge, "label": "correct" if ok else "wrong"}
            )
    return pd.DataFrame(rows, columns=["iteration", "judge", "label"])


def collective_label_accuracy(prefs: pd.DataFrame, duels: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Label accuracy of the pool's preference pairs, overall and per iteration."""
    answers = duels.drop_duplicates("prompt_id").set_index("prompt_id")["answer"]
    labelled = metrics.label_accuracy(prefs, answers, kind)
    parts = _by_scope(labelled, {"overall": [], "iteration": ["iteration"]})
    if "trainee" in labelled and labelled["trainee"].notna().any():  # a baseline: whose pairs
        mine = labelled.dropna(subset=["trainee"]).rename(columns={"trainee": "judge"})
        parts += _by_scope(mine, {"trainee": ["judge"], "iteration x trainee": ["iteration", "judge"]})
    parts = [p for p in parts if len(p)]
    if not parts:  # no pairs (e.g. every actor pair under baselines.min_margin)
        return tables.empty("label_accuracy")
    return pd.concat(parts, ignore_index=True)


def judges_label_accuracy(
    judgments: pd.DataFrame, duels: pd.DataFrame, responses: pd.DataFrame, kind: str
) -> pd.DataFrame:
    """Label accuracy of each judge alone, overall and per iteration."""
    per_judge = judge_label_accuracy(judgments, duels, responses, kind)
    parts = _by_scope(per_judge, {"judge": ["judge"], "iteration x judge": ["iteration", "judge"]})
    return pd.concat(parts, ignore_index=True)


def _by_scope(labelled: pd.DataFrame, scopes: dict[str, list[str]]) -> list[pd.DataFrame]:
    """The label accuracy of ``labelled`` per scope, grouped by that scope's columns."""
    return [metrics.summarize_label_accuracy(labelled, by).assign(scope=s) for s, by in scopes.items()]


def reward_hacking(prefs: pd.DataFrame) -> pd.DataFrame:
    """Per iteration and attack family (:data:`sparta.judging.FAMILIES`, and ``any``: at least
    one), how many chosen and rejected answers the family classifier flags (what a member
    would learn to write if judges could be talked into scores), with 95% Wilson intervals of
    the shares. A monitor: its patterns also match some honest text, so compare chosen with
    rejected and iterations with each other rather than reading a share as a count of attacks."""
    rows = []
    for it, g in prefs.groupby("iteration"):
        n = len(g)
        found = {side: g[side].fillna("").map(attack_families) for side in ("chosen", "rejected")}
        for family in ("any", *FAMILIES):
            row = {"iteration": int(it), "family": family, "pairs": n}
            for side in ("chosen", "rejected"):
                hit = found[side].map(bool if family == "any" else (lambda fs, f=family: f in fs))
                k = int(hit.sum())
                low, high = metrics.wilson_interval(k, n)
                row.update(
                    {
                        f"{side}_flagged": k,
                        f"{side}_share": k / n,
                        f"{side}_share_low": low,
                        f"{side}_share_high": high,
                    }
                )
            rows.append(row)
    return pd.DataFrame(rows, columns=tables.columns("reward_hacking"))


PAIR_KIND = {"score": "actor", "meta": "judge"}
"""The preference pairs made of each kind of judgment (a baseline's)."""


def judging(
    judgments: pd.DataFrame,
    duels: pd.DataFrame,
    prefs: pd.DataFrame,
    owner: str = "judge",
    kinds: tuple[str, ...] = ("score",),
) -> pd.DataFrame:
    """The ``judging`` table (columns: see :mod:`sparta.tables`) per iteration, member and kind
    (``kinds``: those the method writes; ``owner``: the judgments column naming the member whose
    job wrote the row). Every member of every iteration has a row of each kind, so a kind that
    yields nothing (meta-rewarding's judge pairs where none can form) shows 0 rather than no row."""
    iteration = duels.set_index("duel_id")["iteration"]
    members = sorted(set(duels["member_a"]) | set(duels["member_b"]))
    frame = judgments.assign(iteration=judgments["duel_id"].map(iteration), member=judgments[owner])
    baseline = "trainee" in prefs and prefs["trainee"].notna().any()
    made = prefs.groupby(["iteration", "trainee", "kind"]).size() if baseline else None
    rows = []
    iterations = sorted(int(x) for x in duels["iteration"].unique())
    for t, member, kind in itertools.product(iterations, members, kinds):
        g = frame[(frame["iteration"] == t) & (frame["member"] == member) & (frame["kind"] == kind)]
        pairs = pd.NA if made is None else int(made.get((t, member, PAIR_KIND.get(kind, kind)), 0))
        unusable, errors = int(g["score"].isna().sum()), int(g["error"].notna().sum())
        truncated = int(g["truncated"].eq(True).sum())
        rows.append((t, member, kind, len(g), unusable, errors, truncated, pairs))  # the table's columns
    if not rows:
        return tables.empty("judging")
    out = pd.DataFrame(rows, columns=tables.columns("judging"))
    out["pairs"] = out["pairs"].astype("Int64")
    return out


def standings(states: pd.DataFrame) -> pd.DataFrame:
    """The reputation state at the end of every iteration (its last round)."""
    last = states.groupby("iteration")["round"].transform("max") == states["round"]
    return states.loc[last, ["iteration", "member", "reputation", "deviation", "judge_weight"]]


def score_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean score per (task, metric, checkpoint, member, split) over its examples."""
    return rows.groupby(["task", "metric", "checkpoint", "member", "split"], as_index=False).agg(
        score=("score", "mean"), n=("score", "size")
    )


def reputation_vs_performance(states: pd.DataFrame, evaluation: pd.DataFrame | None) -> pd.DataFrame:
    """Pearson r per task between a member's reputation at the end of iteration t and the
    validation score of the member that fought in iteration t (its checkpoint t - 1); over
    every (member, iteration) point and over per-member averages (as the paper's Figure 5)."""
    columns = tables.columns("reputation_vs_performance")
    if evaluation is None:
        return pd.DataFrame(columns=columns)
    rep = states[["iteration", "member", "reputation"]]
    val = evaluation[evaluation["split"] == "validation"].assign(iteration=lambda d: d["checkpoint"] + 1)
    rows = []
    for task, v in val.groupby("task"):
        points = rep.merge(v[["iteration", "member", "score"]], on=["iteration", "member"])
        means = points.groupby("member")[["reputation", "score"]].mean()
        row = {"task": task, "points": len(points), "members": len(means)}
        for name, df in (("r_points", points), ("r_member_means", means)):
            ok = len(df) >= 3 and df["reputation"].std() > 0 and df["score"].std() > 0
            row[name] = float(pearsonr(df["reputation"], df["score"])[0]) if ok else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


SELECTED = "selected"
"""Stage of the selection row a run reports: its best member under evaluation.select_from."""


def select_best(evaluation: pd.DataFrame, select_from: str = "all") -> pd.DataFrame:
    """Per task: the best member on validation among the initial pool (checkpoint 0), among
    the final members, and the run's ``selected`` one (paper protocol: among every member of
    every checkpoint with ``select_from`` all, among the final ones with final), each with its
    test score. Ties on validation go to the earlier checkpoint, then the member's name;
    ``tied`` says how many candidates shared the best validation score (1: no tie-break)."""
    if select_from not in ("all", "final"):
        raise ValueError(f"select_from must be all or final, not {select_from!r}")
    table = evaluation.pivot_table(
        index=["task", "checkpoint", "member"], columns="split", values="score"
    ).reset_index()
    last = table["checkpoint"].max()
    rows = []
    for task, t in table.groupby("task"):
        for stage, pick in (
            ("best initial", t["checkpoint"] == 0),
            ("best final", t["checkpoint"] == last),
            (SELECTED, t["checkpoint"] == last if select_from == "final" else t["checkpoint"] >= 0),
        ):
            cand = t[pick]
            if len(cand) == 0:
                continue
            best = cand.sort_values(
                ["validation", "checkpoint", "member"], ascending=[False, True, True]
            ).iloc[0]
            rows.append(
                {
                    "task": task,
                    "stage": stage,
                    "checkpoint": int(best["checkpoint"]),
                    "member": best["member"],
                    "validation": float(best["validation"]),
                    "test": float(best.get("test", np.nan)),
                    "tied": int((cand["validation"] == best["validation"]).sum()),
                }
            )
    return pd.DataFrame(rows)
