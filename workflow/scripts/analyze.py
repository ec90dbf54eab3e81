"""rule analyze: the paper's analyses over the whole run."""

import pandas as pd

from sparta import analysis, metrics, tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
files = list(sm.input.rounds)
duels = tables.read_many([f for f in files if f.endswith("/duels.parquet")], "duels")
states = tables.read_many([f for f in files if f.endswith("/state.parquet")], "state")
judgments = tables.read_many([f for f in files if "/judgments/" in f], "judgments")
responses = tables.read_many([f for f in files if "/responses/" in f], "responses")
prefs = tables.read_many(sm.input.preferences, "preferences")
cfg = sm.params.analysis

embed = None
if cfg.get("embedding_package"):
    from sparta.evaluate import load_embedder

    embed = load_embedder(cfg["embedding_package"])
per_duel = analysis.pair_diversity(responses, duels, embed)
diversity = analysis.diversity_by_iteration(per_duel) if len(per_duel) else pd.DataFrame()
diversity.to_parquet(sm.output.diversity, index=False)
analysis.lengths(prefs).to_parquet(sm.output.lengths, index=False)

answer_kind = sm.params.answer
if answer_kind and duels["answer"].notna().any():
    answers = duels.drop_duplicates("prompt_id").set_index("prompt_id")["answer"]
    labelled = metrics.label_accuracy(prefs, answers, answer_kind)
    overall = metrics.summarize_label_accuracy(labelled.assign(scope="overall"), ["scope"])
    per_iter = metrics.summarize_label_accuracy(labelled, ["iteration"]).assign(scope="iteration")
    label = pd.concat([overall, per_iter], ignore_index=True)
    per_judge = analysis.judge_label_accuracy(judgments, duels, responses, answer_kind)
    judge_acc = pd.concat(
        [
            metrics.summarize_label_accuracy(per_judge, ["judge"]).assign(scope="judge"),
            metrics.summarize_label_accuracy(per_judge, ["iteration", "judge"]).assign(
                scope="iteration x judge"
            ),
        ],
        ignore_index=True,
    )
else:
    log.info("no ground truth for the alignment prompts: label accuracy skipped")
    label, judge_acc = pd.DataFrame(), pd.DataFrame()
label.to_parquet(sm.output.label_accuracy, index=False)
judge_acc.to_parquet(sm.output.judge_accuracy, index=False)

last_round = states.groupby("iteration")["round"].transform("max") == states["round"]
end_states = states[last_round]
end_states[["iteration", "member", "reputation", "deviation", "judge_weight"]].to_parquet(
    sm.output.standings, index=False
)
if sm.input.evaluation:
    corr = analysis.reputation_vs_performance(end_states, pd.read_parquet(sm.input.evaluation))
else:
    corr = pd.DataFrame(columns=["task", "points", "members", "r_points", "r_member_means"])
corr.to_parquet(sm.output.correlation, index=False)
log.info("diversity:\n%s", diversity.to_string(index=False))
log.info("label accuracy:\n%s", label.to_string(index=False))
log.info("reputation vs validation performance:\n%s", corr.to_string(index=False))
