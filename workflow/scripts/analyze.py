"""rule analyze: the paper's analyses over the whole run."""

import pandas as pd

from sparta import analysis, tables
from sparta.logs import setup
from sparta.methods import get
from sparta.settings import job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
cfg = job.analysis
inp, out = sm.input, sm.output
duels = tables.read_many(inp.duels, "duels")
states = tables.read_many(inp.states, "state")
judgments = tables.read_many(inp.judgments, "judgments")
responses = tables.read_many(inp.responses, "responses")
prefs = tables.read_many(inp.preferences, "preferences")

embed = None
if cfg.embedding_package:
    from sparta.models import load_embedder

    embed = load_embedder(cfg.embedding_package)
diversity = analysis.diversity_by_iteration(analysis.pair_diversity(responses, duels, embed))
tables.write(diversity, out.diversity, "diversity")
history = tables.read(inp.history, "history")
pairs = analysis.pair_counts(
    get(sm.params.method), duels, responses, judgments, history, prefs, baselines=job.baselines
)
tables.write(pairs, out.pairs, "pairs")
tables.write(analysis.lengths(prefs), out.lengths, "lengths")
hacking = analysis.reward_hacking(prefs)
tables.write(hacking, out.reward_hacking, "reward_hacking")

if cfg.answer and duels["answer"].notna().any():
    actor = prefs[prefs["kind"] == "actor"]
    label = analysis.collective_label_accuracy(actor, duels, cfg.answer)
    judge_acc = tables.empty("judge_label_accuracy")  # judges of other members' answers: Sparta's
    if get(sm.params.method).judges_label_accuracy:
        judge_acc = analysis.judges_label_accuracy(judgments, duels, responses, cfg.answer)
else:
    log.info("no ground truth for the alignment prompts: label accuracy skipped")
    label, judge_acc = tables.empty("label_accuracy"), tables.empty("judge_label_accuracy")
tables.write(label, out.label_accuracy, "label_accuracy")
tables.write(judge_acc, out.judge_label_accuracy, "judge_label_accuracy")

training = tables.read_many(inp.training_logs, "training_log")
tables.write(training, out.training, "training")
pair_accuracy = tables.read_many(inp.pair_accuracy, "pair_accuracy")
tables.write(pair_accuracy, out.pair_accuracy, "pair_accuracy")
method = get(sm.params.method)
judging = analysis.judging(judgments, duels, prefs, method.judgment_owner, method.judgment_kinds)
tables.write(judging, out.judging, "judging")
standings = analysis.standings(states)
tables.write(standings, out.standings, "standings")
evaluation = tables.read(inp.evaluation, "scores") if inp.evaluation else None
corr = analysis.reputation_vs_performance(standings, evaluation)
tables.write(corr, out.reputation_vs_performance, "reputation_vs_performance")
with pd.option_context("display.width", 160):
    log.info("diversity:\n%s", diversity.to_string(index=False))
    log.info("preference pairs, and those dropped as identical texts:\n%s", pairs.to_string(index=False))
    log.info("label accuracy:\n%s", label.to_string(index=False))
    log.info("reputation vs validation performance:\n%s", corr.to_string(index=False))
    log.info("answers with score-like text or notes to the judge:\n%s", hacking.to_string(index=False))
    log.info("judging (rows, unusable, errors, truncated, pairs made):\n%s", judging.to_string(index=False))
meta = judging[judging["kind"] == "meta"]
if len(meta) and (meta["pairs"] == 0).any():  # meta-rewarding: where no judge pair formed
    none = meta[meta["pairs"] == 0]
    log.warning(
        "no judge pair in %d of %d (iteration, member): %s",
        len(none),
        len(meta),
        ", ".join(f"{r.member}@{r.iteration}" for r in none.itertuples(index=False)),
    )
