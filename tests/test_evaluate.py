"""Evaluation of a member on each kind of task, on a tiny random model."""

import json

import pandas as pd
import pytest

from sparta.settings import TaskSpec
from sparta.tasks import TaskError, load_task

from .helpers import evaluate_task, served_model


@pytest.fixture
def files(tmp_path):
    mc = pd.DataFrame(
        {
            "question": [f"Which is {i}?" for i in range(6)],
            "options": [["1", "2", "3", "4"]] * 6,
            "letter": list("ABCDAB"),
            "labels": [[1, 0, 0, 0]] * 6,
            "reference": ["one"] * 6,
        }
    )
    mc.to_json(tmp_path / "mc.jsonl", orient="records", lines=True)
    mc.assign(options=mc["options"].map(json.dumps), labels=mc["labels"].map(json.dumps)).to_parquet(
        tmp_path / "tqa.parquet"
    )
    return tmp_path


def test_each_metric_runs_and_scores_in_range(tiny, files):
    model, tok = tiny
    prompts = pd.DataFrame(
        {
            "prompt_id": ["a", "b"],
            "prompt": ["What is 3 + 4?", "What is 2 * 5?"],
            "answer": ["7", "10"],
            "domain": "x",
        }
    )
    splits = {"validation": prompts, "test": prompts}
    specs = [
        {"name": "arith", "source": "prompts", "metric": "exact_match", "max_new_tokens": 4},
        {
            "name": "mc",
            "file": str(files / "mc.jsonl"),
            "prompt_column": "question",
            "answer_column": "letter",
            "options_column": "options",
            "metric": "multiple_choice",
            "max_new_tokens": 4,
        },
        {
            "name": "tqa",
            "file": str(files / "tqa.parquet"),
            "prompt_column": "question",
            "options_column": "options",
            "labels_column": "labels",
            "metric": "truthfulqa_mc",
        },
        {
            "name": "open",
            "file": str(files / "mc.jsonl"),
            "prompt_column": "question",
            "reference_column": "reference",
            "metric": "judge_score",
            "max_new_tokens": 4,
        },
    ]
    for spec in specs:
        task = load_task(TaskSpec(**spec), splits, seed=0)
        served = served_model(model, tok)
        result = evaluate_task(served, task, "sys", batch_size=4, judge=served)
        assert set(result["split"]) == {"validation", "test"}
        low, high = (0, 10) if spec["metric"] == "judge_score" else (0, 1)
        assert result["score"].between(low, high).all(), spec["name"]
        if spec["metric"] == "truthfulqa_mc":
            assert set(result["mc1"]) <= {0.0, 1.0}
    # a file task is split in half with the seed
    task = load_task(TaskSpec(**specs[1]), splits, seed=0)
    assert len(task.rows["validation"]) == 3 and len(task.rows["test"]) == 3


def test_bad_task_is_named(files):
    with pytest.raises(TaskError, match="no column 'choices'"):
        load_task(
            TaskSpec(
                **{
                    "name": "mc",
                    "file": str(files / "mc.jsonl"),
                    "prompt_column": "question",
                    "options_column": "choices",
                    "metric": "multiple_choice",
                }
            ),
            {},
            0,
        )
    with pytest.raises(TaskError, match="unknown metric"):
        load_task(TaskSpec(**{"name": "x", "file": str(files / "mc.jsonl"), "metric": "bleu"}), {}, 0)
    with pytest.raises(TaskError, match="does not exist"):
        load_task(TaskSpec(**{"name": "x", "file": str(files / "nope.jsonl"), "prompt_column": "q"}), {}, 0)


def test_options_and_labels_are_parsed_when_the_task_loads(files):
    """Options and labels are lists once the task is loaded (JSON text or lists in the file),
    and a cell that is no list is named then, not at scoring."""
    from sparta.evaluate import SCORERS

    spec = {
        "name": "tqa",
        "file": str(files / "tqa.parquet"),
        "prompt_column": "question",
        "options_column": "options",
        "labels_column": "labels",
        "metric": "truthfulqa_mc",
    }
    task = load_task(TaskSpec(**spec), {}, 0)
    assert task.options["test"][0] == ["1", "2", "3", "4"] and task.labels["test"][0] == [1, 0, 0, 0]
    assert "options" not in task.rows["test"] and task.metric in SCORERS
    bad = files / "bad.jsonl"
    bad.write_text('{"question": "q1", "options": "[1, 2"}\n{"question": "q2", "options": "[1]"}\n')
    spec.update(file=str(bad), labels_column=None, metric="multiple_choice", answer_column="question")
    with pytest.raises(TaskError, match="options is not a list"):
        load_task(TaskSpec(**spec), {}, 0)
