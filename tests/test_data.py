"""The embedded default's data: regenerated from the seed, it equals the committed files."""

import re
from pathlib import Path

import pytest

from sparta.data import DOMAINS, PromptFileError, main, read_prompt_file, split

REPO = Path(__file__).resolve().parents[1]


def test_committed_data_is_what_the_generator_writes(tmp_path):
    main(["--out", str(tmp_path)])
    names = ["arithmetic.jsonl", "arithmetic-large.jsonl", "arithmetic-reworded.jsonl"]
    names += [f"sft/{d}.jsonl" for d in DOMAINS]
    for name in names:
        assert (tmp_path / name).read_text() == (REPO / "data" / name).read_text(), name


def test_prompts_have_right_answers_and_split_is_seeded():
    prompts = read_prompt_file(REPO / "data/arithmetic.jsonl", "prompt", "answer", "prompt_id")
    add = prompts[prompts["prompt"].str.fullmatch(r"What is \d+ \+ \d+\?")]
    for p, a in zip(add["prompt"], add["answer"]):
        x, y = map(int, p[8:-1].split(" + "))
        assert x + y == int(a)
    one, two = split(prompts, 0.2, 0.2, 42), split(prompts, 0.2, 0.2, 42)
    assert [len(one[k]) for k in ("alignment", "validation", "test")] == [240, 80, 80]
    assert one["test"]["prompt_id"].tolist() == two["test"]["prompt_id"].tolist()
    assert not set(one["test"]["prompt_id"]) & set(one["alignment"]["prompt_id"])


def test_reworded_prompts_are_right_and_never_worded_as_the_training_prompts():
    reworded = read_prompt_file(REPO / "data/arithmetic-reworded.jsonl", "prompt", "answer", "prompt_id")
    training = read_prompt_file(REPO / "data/arithmetic-large.jsonl", "prompt", "answer", "prompt_id")
    assert len(reworded) == 400 and reworded["prompt"].is_unique
    assert not reworded["prompt"].str.startswith("What is").any()
    assert not set(reworded["prompt"]) & set(training["prompt"])
    for text, answer in zip(reworded["prompt"], reworded["answer"]):
        a, b = map(int, re.findall(r"\d+", text))
        if any(w in text for w in ("product", "Multiply", "boxes")):
            expected = a * b
        elif any(w in text for w in ("sum", "Add", "combine", "more jars")):
            expected = a + b
        else:
            expected = abs(a - b)  # "Take b away from a", "Subtract b from a": b first
        assert int(answer) == expected, text


def test_prompt_file_errors(tmp_path):
    (tmp_path / "p.csv").write_text("question\nhi\n")
    with pytest.raises(PromptFileError, match="no column 'prompt'"):
        read_prompt_file(tmp_path / "p.csv", "prompt")
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(PromptFileError, match="use .jsonl"):
        read_prompt_file(tmp_path / "p.txt", "prompt")
