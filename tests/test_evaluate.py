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


def test_an_answer_column_that_holds_no_value_is_told_apart_from_none(tmp_path):
    """A task scored against answers: a column that is there but null in every row says so
    (it used to read as if the task had no answer column); no answer_column asks for one."""
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"q": f"What is {i} + 1?", "a": None}) + "\n" for i in range(6)))
    spec = {"name": "t", "file": str(path), "prompt_column": "q", "metric": "exact_match"}
    with pytest.raises(TaskError) as e:
        load_task(TaskSpec(**spec, answer_column="a"), {}, 0)
    assert f"column 'a' of {path} is there but holds no value (null in every validation row)" in str(e.value)
    assert "no answer column" not in str(e.value)
    with pytest.raises(TaskError) as e:
        load_task(TaskSpec(**spec), {}, 0)
    assert f"set answer_column to the column of {path} that holds them" in str(e.value)


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


def test_hub_shaped_tasks_load_as_the_paper_s_datasets_hold_them(tmp_path):
    """MedQA's options as a mapping of letters to texts, TruthfulQA's choices and labels inside
    one column (``mc1_targets.choices``), and MATH's difficulty bins (``where``)."""
    medqa = pd.DataFrame(
        {
            "question": [f"Case {i}?" for i in range(8)],
            "options": [{"B": "second", "A": "first", "C": "third", "D": "fourth"}] * 8,
            "answer_idx": list("ABCDABCD"),
        }
    )
    medqa.to_json(tmp_path / "medqa.jsonl", orient="records", lines=True)
    spec = {"name": "medqa", "file": str(tmp_path / "medqa.jsonl"), "prompt_column": "question"}
    task = load_task(
        TaskSpec(**spec, answer_column="answer_idx", options_column="options", metric="multiple_choice"),
        {},
        0,
    )
    assert task.options["test"][0] == ["first", "second", "third", "fourth"]  # in letter order
    tqa = pd.DataFrame(
        {
            "question": [f"Q{i}?" for i in range(6)],
            "mc1_targets": [{"choices": ["right", "wrong"], "labels": [1, 0]}] * 6,
        }
    )
    tqa.to_parquet(tmp_path / "tqa.parquet")  # a struct column, as the hub's Parquet holds it
    spec = {"name": "tqa", "file": str(tmp_path / "tqa.parquet"), "prompt_column": "question"}
    task = load_task(
        TaskSpec(
            **spec,
            options_column="mc1_targets.choices",
            labels_column="mc1_targets.labels",
            metric="truthfulqa_mc",
        ),
        {},
        0,
    )
    assert task.options["test"][0] == ["right", "wrong"] and task.labels["test"][0] == [1, 0]
    with pytest.raises(TaskError, match="no field 'nope'"):
        load_task(TaskSpec(**spec, options_column="mc1_targets.nope", metric="truthfulqa_mc"), {}, 0)
    math = pd.DataFrame(
        {
            "problem": [f"P{i}" for i in range(12)],
            "solution": [f"\\boxed{{{i}}}" for i in range(12)],
            "level": [f"Level {1 + i % 5}" for i in range(12)],
        }
    )
    math.to_json(tmp_path / "math.jsonl", orient="records", lines=True)
    spec = {"name": "easy", "file": str(tmp_path / "math.jsonl"), "prompt_column": "problem"}
    easy = TaskSpec(**spec, answer_column="solution", answer="boxed", where={"level": ["Level 1", "Level 2"]})
    task = load_task(easy, {}, 0)
    asked = set(task.rows["validation"]["prompt"]) | set(task.rows["test"]["prompt"])
    assert asked == {"P0", "P1", "P5", "P6", "P10", "P11"}
    with pytest.raises(TaskError, match="no row matches where"):
        load_task(TaskSpec(**spec, answer_column="solution", where={"level": "Level 9"}), {}, 0)


def test_a_task_built_from_columns_scores_letters(tmp_path):
    """NormAd as a task: the prompt built from its columns lists the options, the answers are
    mapped to their letters, so multiple_choice reads the letter it asks for."""
    rows = pd.DataFrame(
        {
            "Story": [f"Story {i}." for i in range(8)],
            "Country": ["japan", "peru"] * 4,
            "Gold Label": ["yes", "no", "neutral", "yes"] * 2,
        }
    )
    rows.to_csv(tmp_path / "normad.csv", index=False)
    spec = TaskSpec(
        name="normad",
        file=str(tmp_path / "normad.csv"),
        prompt_column="Story",
        answer_column="Gold Label",
        prompt_template="{Story} ({Country}) Acceptable? A. Yes B. No C. Neutral",
        answer_map={"yes": "A", "no": "B", "neutral": "C"},
        metric="multiple_choice",
    )
    task = load_task(spec, {}, 0)
    both = pd.concat([task.rows["validation"], task.rows["test"]])
    assert set(both["answer"]) == {"A", "B", "C"} and both["prompt"].str.endswith("C. Neutral").all()
    assert set(both["prompt"].str.extract(r"\((\w+)\) Acceptable\?")[0]) == {"japan", "peru"}
