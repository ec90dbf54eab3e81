"""The report's figures from small hand-made tables: right content, PNG output, and a clear
empty panel when there is nothing to show."""

import pandas as pd

from sparta import figures, tables


def _history():
    rows = []
    for i, (a, b, outcome) in enumerate(
        [("x", "y", "a"), ("y", "z", "b"), ("z", "x", "tie"), ("x", "z", "a")]
    ):
        rows.append(
            {
                "iteration": 1 + i // 2,
                "round": 0,
                "duel_id": f"t0{1 + i // 2}-{i:05d}",
                "member_a": a,
                "member_b": b,
                "score_a": 6.0,
                "score_b": 5.0,
                "n_judges": 1,
                "dropped_judges": 0,
                "gap": 1.0,
                "reputation_a_before": 100.0 + i,
                "reputation_a_after": 101.0 + i,
                "deviation_a_before": 0.5,
                "deviation_a_after": 0.4,
                "reputation_b_before": 100.0 - i,
                "reputation_b_after": 99.0 - i,
                "deviation_b_before": 0.5,
                "deviation_b_after": 0.6,
                "kappa": 10.0,
                "outcome": outcome,
            }
        )
    return pd.DataFrame(rows, columns=tables.columns("history"))


def test_win_matrix_counts_verdicts_only():
    wins = figures.win_matrix(_history())
    assert wins.loc["x", "y"] == 1 and wins.loc["z", "y"] == 1 and wins.loc["x", "z"] == 1
    assert int(wins.to_numpy().sum()) == 3  # the tie is not a win


def test_every_figure_writes_a_png(tmp_path):
    history = _history()
    judgments = pd.DataFrame(
        {"duel_id": ["t01-00000"] * 2, "judge": ["z", "z"], "target": ["x", "y"], "score": [7.0, None]}
    )
    label = pd.DataFrame(
        {
            "scope": ["overall", "iteration", "iteration", "iteration x judge"],
            "iteration": [None, 1, 2, 1],
            "judge": [None, None, None, "z"],
            "correct": [3, 2, 1, 1],
            "wrong": [1, 0, 1, 0],
            "informative": [4, 2, 2, 1],
            "pairs": [5, 3, 2, 1],
            "accuracy": [0.75, 1.0, 0.5, 1.0],
            "accuracy_low": [0.3, 0.34, 0.09, 0.2],
            "accuracy_high": [0.95, 1.0, 0.91, 1.0],
        }
    )
    diversity = pd.DataFrame({"iteration": [1, 2], "edit": [0.5, 0.4], "one_minus_bleu": [0.9, 0.8]})
    scores = pd.DataFrame(
        {
            "task": "arith",
            "metric": "exact_match",
            "checkpoint": [0, 1, 0, 1],
            "member": ["x", "x", "y", "y"],
            "split": "validation",
            "score": [0.2, 0.3, 0.4, 0.1],
            "n": 10,
        }
    )
    log = pd.DataFrame(
        {
            "member": ["x", "x", "y", "y"],
            "iteration": [1, 1, 1, 2],
            "stage": "dpo",
            "loss": [0.7, 0.6, 0.69, 0.5],
            "rewards_accuracies": [0.5, 1.0, 0.0, 1.0],
            "rewards_margins": [0.01, 0.05, -0.01, 0.1],
        }
    )
    held_out = pd.DataFrame(  # two DPO iterations: every member twice before and after
        {
            "iteration": [1, 1, 1, 1, 2, 2, 2, 2],
            "member": ["x", "x", "y", "y"] * 2,
            "when": ["before", "after", "before", "after"] * 2,
            "pairs": [12] * 4 + [9] * 4,
            "accuracy": [0.5, 0.58, 0.42, 0.5] * 2,
            "accuracy_low": [0.25, 0.32, 0.19, 0.25] * 2,
            "accuracy_high": [0.75, 0.81, 0.68, 0.75] * 2,
        }
    )
    made = {
        "training": figures.training(log, held_out),
        "reputation": figures.reputation(history),
        "wins": figures.wins(history),
        "scores": figures.judge_scores(judgments),
        "label": figures.label_accuracy(label),
        "diversity": figures.diversity(diversity),
        "hacking": figures.reward_hacking(
            pd.DataFrame(
                {
                    "iteration": [1, 2],
                    "pairs": [10, 12],
                    "chosen_share": [0.1, 0.0],
                    "chosen_share_low": [0.02, 0.0],
                    "chosen_share_high": [0.4, 0.24],
                    "rejected_share": [0.0, 0.08],
                    "rejected_share_low": [0.0, 0.01],
                    "rejected_share_high": [0.28, 0.35],
                }
            )
        ),
        "evaluation": figures.evaluation(scores),
    }
    rep_axes = made["reputation"].axes[0]
    assert {line.get_label() for line in rep_axes.get_lines()} >= {"x", "y", "z"}
    for name, fig in made.items():
        path = tmp_path / f"{name}.png"
        figures.save(fig, path)
        assert path.read_bytes()[:4] == b"\x89PNG", name


def test_empty_inputs_say_why():
    empty_history = tables.empty("history")
    for fig, why in (
        (figures.reputation(empty_history), "no duel"),
        (figures.judge_scores(tables.empty("judgments")), "no usable judgment"),
        (figures.label_accuracy(tables.empty("label_accuracy")), "no ground truth"),
        (figures.diversity(tables.empty("diversity")), "no duel with two answers"),
        (figures.evaluation(None), "evaluation is off"),
        (figures.training(tables.empty("training_log"), tables.empty("pair_accuracy")), "no DPO step"),
    ):
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert any(why in t for t in texts), (why, texts)


def test_comparison_figure_shows_every_experiment_and_the_cost():
    rows = []
    for exp, d, sig in (("best init", None, False), ("sparta", 0.05, True), ("spin", -0.01, False)):
        row = {"task": "arith", "experiment": exp, "seeds": 2, "items": 100, "test": 0.5 + (d or 0)}
        row.update(
            {
                "vs_best_init": d,
                "vs_best_init_low": None if d is None else d - 0.03,
                "vs_best_init_high": None if d is None else d + 0.03,
                "vs_best_init_significant": sig,
            }
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    cost = pd.DataFrame(
        {
            "experiment": ["sparta", "sparta", "spin"],
            "iteration": [1, 2, 1],
            "tokens_generated": [100.0, 300.0, 50.0],
            "tokens_judged": [800.0, 800.0, 0.0],
        }
    )
    fig = figures.comparison(table, cost)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["sparta (0.550)", "spin (0.490)"]
    markers = [line for line in left.get_lines() if line.get_marker() == "o"]
    assert [m.get_markerfacecolor() == "white" for m in markers] == [False, True]  # filled = significant
    widths = sorted(round(p.get_width()) for p in right.patches)
    assert widths == [0, 50, 200, 800]  # sparta: mean of 100 and 300 tokens generated a iteration
    assert "no experiment" in figures.comparison(table.iloc[:0], cost).axes[0].texts[0].get_text()


def test_an_interval_rounded_inside_its_estimate_still_draws(tmp_path):
    # a study's judges were right in all of 60 informative pairs: the upper end of the stored
    # interval was 1 - 1e-16, which matplotlib refuses as a negative error bar
    label = pd.DataFrame(
        {
            "scope": ["iteration", "iteration"],
            "iteration": [1, 2],
            "judge": [None, None],
            "correct": [60, 30],
            "wrong": [0, 10],
            "informative": [60, 40],
            "pairs": [60, 40],
            "accuracy": [1.0, 0.75],
            "accuracy_low": [0.94, 0.6],
            "accuracy_high": [1.0 - 1e-16, 0.86],
        }
    )
    fig = figures.label_accuracy(label)
    figures.save(fig, tmp_path / "label.png")
    assert (tmp_path / "label.png").read_bytes()[:4] == b"\x89PNG"


def test_label_accuracy_draws_each_judge_and_reputation_bands_never_hide_the_moves():
    label = pd.DataFrame(
        {"scope": ["iteration"] * 2, "iteration": [1, 2], "judge": [None, None], "informative": [10, 12]}
        | {"accuracy": [0.5, 0.6], "accuracy_low": [0.2, 0.3], "accuracy_high": [0.8, 0.85]}
    )
    judges = pd.DataFrame(
        {"scope": ["iteration x judge"] * 4, "iteration": [1, 2, 1, 2], "judge": ["a", "a", "b", "b"]}
        | {"accuracy": [0.4, 0.7, 0.6, 0.5], "informative": [5, 6, 5, 6]}
    )
    fig = figures.label_accuracy(label, judges)
    assert {"judge a (alone)", "judge b (alone)"} <= {h.get_label() for h in fig.axes[0].get_lines()}
    history = pd.DataFrame(  # moves of 0.002 under deviations of 0.1: no band, said on the axis
        {
            "iteration": [1, 1],
            "member_a": ["x", "y"],
            "member_b": ["y", "x"],
            "reputation_a_before": [100.0, 99.999],
            "reputation_a_after": [100.002, 100.0],
            "reputation_b_before": [100.0, 100.002],
            "reputation_b_after": [99.999, 100.001],
            "deviation_a_before": [0.5, 0.1],
            "deviation_a_after": [0.1, 0.1],
            "deviation_b_before": [0.5, 0.1],
            "deviation_b_after": [0.1, 0.1],
        }
    )
    fig = figures.reputation(history)
    assert fig.axes[0].get_ylabel() == "reputation (deviations: below)" and not fig.axes[0].collections
