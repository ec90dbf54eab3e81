"""rule plots: the report's figures (PNG)."""

from sparta import figures, tables
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
inp, out = sm.input, sm.output
history = tables.read(inp.history, "reputation_history")
scores = tables.read(inp.evaluation, "scores") if inp.evaluation else None
made = {
    out.reputation: figures.reputation(history),
    out.wins: figures.wins(history),
    out.scores: figures.judge_scores(tables.read_many(inp.judgments, "judgments")),
    out.label_accuracy: figures.label_accuracy(
        tables.read(inp.label_accuracy, "label_accuracy"),
        tables.read(inp.judge_label_accuracy, "judge_label_accuracy"),
    ),
    out.diversity: figures.diversity(tables.read(inp.diversity, "diversity")),
    out.reward_hacking: figures.reward_hacking(tables.read(inp.reward_hacking, "reward_hacking")),
    out.training: figures.training(
        tables.read(inp.training, "training"), tables.read(inp.pair_accuracy, "pair_accuracy")
    ),
    out.evaluation: figures.evaluation(scores),
}
for path, fig in made.items():
    figures.save(fig, path)
log.info("wrote %d figures", len(made))
