"""Prompt and SFT files checked for their meaning before any job: prompts are non-empty text
(named by file, line or row, and column), a line that is not JSON names its line, a byte
order mark is fine, a prompt written twice never lands in two splits, and an SFT domain file
holds the examples sft.examples asks for."""

import copy
import json

import pandas as pd
import pytest

from sparta import config as sparta_config
from sparta.data import PromptFileError, duplicate_prompts, read_prompt_file, read_table_file, split

from .workflow_helpers import REPO, tiny_config


def jsonl(path, *rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def read_error(path, column="prompt") -> str:
    with pytest.raises(PromptFileError) as e:
        read_prompt_file(path, column)
    return str(e.value)


@pytest.mark.parametrize(
    "bad, what",
    [
        ({"prompt": 42}, "line 2: a number (42)"),
        ({"prompt": 2.5}, "line 2: a number (2.5)"),
        ({"prompt": True}, "line 2: a boolean (True)"),
        ({"prompt": [{"role": "user", "content": "hi"}]}, "line 2: a list (chat messages?)"),
        ({"prompt": ["a", "b"]}, "line 2: a list"),
        ({"prompt": {"text": "hi"}}, "line 2: an object"),
        ({"prompt": "   \t"}, "line 2: only whitespace"),
        ({"prompt": ""}, "line 2: empty text"),
        ({"prompt": None}, "line 2: empty (null)"),
        ({"other": "x"}, "line 2: empty (null)"),
    ],
)
def test_prompts_must_be_non_empty_text(tmp_path, bad, what):
    path = jsonl(tmp_path / "p.jsonl", {"prompt": "What is 2 + 2?"}, bad, {"prompt": "Fine."})
    text = read_error(path)
    assert f"prompt file {path}: column 'prompt' (prompts.prompt_column)" in text, text
    assert what in text and "line 1" not in text and "line 3" not in text, text


def test_every_bad_row_is_named_up_to_five(tmp_path):
    path = jsonl(tmp_path / "p.jsonl", *[{"prompt": i} for i in range(8)])
    text = read_error(path)
    assert "line 1: a number (0)" in text and "line 5: a number (4)" in text
    assert "line 6" not in text and "and 3 more" in text, text


def test_text_that_looks_like_a_number_is_a_prompt(tmp_path):
    path = jsonl(tmp_path / "p.jsonl", {"prompt": "123"}, {"prompt": "1e5"})
    assert read_prompt_file(path, "prompt")["prompt"].tolist() == ["123", "1e5"]


def test_blank_lines_count_for_the_line_number(tmp_path):
    path = jsonl(tmp_path / "p.jsonl", {"prompt": "a"}, "", {"prompt": 7})
    assert "line 3: a number (7)" in read_error(path)


@pytest.mark.parametrize(
    "line, what",
    [
        ('{"prompt": "unterminated}', "line 2 is not valid JSON"),
        ("{'prompt': 'single quotes'}", "line 2 is not valid JSON"),
        ('["a list"]', "line 2 is not a JSON object (list)"),
        ("42", "line 2 is not a JSON object (int)"),
    ],
)
def test_a_line_that_is_not_json_names_its_line(tmp_path, line, what):
    path = jsonl(tmp_path / "p.jsonl", {"prompt": "a"}, line, {"prompt": "b"})
    text = read_error(path)
    assert f"prompt file {path}: {what}" in text, text


def test_a_json_file_that_is_not_json_names_its_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[\n  {"prompt": "a"},\n  {"prompt": "b",}\n]\n')
    assert "not valid JSON at line 3" in read_error(path)


def test_json_lines_saved_as_json_are_told_to_be_renamed(tmp_path):
    path = jsonl(tmp_path / "prompts.json", {"prompt": "a"}, {"prompt": "b"})
    text = read_error(path)
    assert "looks like JSON Lines" in text and "rename it prompts.jsonl" in text, text
    assert "Extra data" not in text
    (tmp_path / "two.json").write_text('[{"prompt": "a"}]\n[{"prompt": "b"}]\n')  # not lines of objects
    assert "not valid JSON at line 2: Extra data" in read_error(tmp_path / "two.json")


def test_a_folder_named_as_the_prompt_file_is_told_to_be_a_file(tmp_path):
    (tmp_path / "prompts").mkdir()
    text = read_error(tmp_path / "prompts")
    assert f"prompt file {tmp_path / 'prompts'} is a folder (config key prompts.file)" in text, text
    assert "name a file in it" in text and "does not exist" not in text


def test_a_csv_prompt_the_reader_takes_for_missing_says_so(tmp_path):
    """pandas reads NA, null, None... in a CSV cell as a missing value, quoted or not: the
    message names the text and the way to keep it (a jsonl or parquet file)."""
    (tmp_path / "p.csv").write_text('prompt,answer\nhello,1\nNA,2\n"null",3\n,4\n')
    text = read_error(tmp_path / "p.csv")
    assert "row 2 (line 3): 'NA', read as missing; row 3 (line 4): 'null', read as missing" in text, text
    assert "the CSV reader takes NA, N/A, NaN, null, None and the like for a missing value" in text
    assert text.endswith("write the prompts as .jsonl or .parquet)")
    assert "row 4 (line 5): empty (null)" in text  # a cell with nothing in it
    jsonl(tmp_path / "p.jsonl", {"prompt": "hello"}, {"prompt": "NA"})
    assert read_prompt_file(tmp_path / "p.jsonl", "prompt")["prompt"].tolist() == ["hello", "NA"]


def test_a_byte_order_mark_is_accepted(tmp_path):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}, {"prompt": "What is 2 + 2?", "answer": "4"}]
    body = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "p.jsonl").write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "p.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(rows).encode())
    (tmp_path / "p.csv").write_bytes(b"\xef\xbb\xbfprompt,answer\nWhat is 1 + 1?,2\nWhat is 2 + 2?,4\n")
    for name in ("p.jsonl", "p.json", "p.csv"):
        got = read_prompt_file(tmp_path / name, "prompt", "answer")
        assert got["prompt"].tolist() == ["What is 1 + 1?", "What is 2 + 2?"], name
        assert got["answer"].tolist() == ["2", "4"], name
    (tmp_path / "latin.jsonl").write_bytes('{"prompt": "caf\xe9"}\n'.encode("latin-1"))
    assert "is not UTF-8 text" in read_error(tmp_path / "latin.jsonl")


def test_csv_and_parquet_prompts(tmp_path):
    (tmp_path / "p.csv").write_text('prompt\nhello\n"   "\n')
    assert "row 2 (line 3): only whitespace" in read_error(tmp_path / "p.csv")
    (tmp_path / "n.csv").write_text("prompt\n1\n2\n")  # a csv cell is text
    assert read_prompt_file(tmp_path / "n.csv", "prompt")["prompt"].tolist() == ["1", "2"]
    pd.DataFrame({"prompt": [b"bytes", b"more"]}).to_parquet(tmp_path / "b.parquet")
    assert "row 1: bytes" in read_error(tmp_path / "b.parquet")
    pd.DataFrame({"prompt": [["a"], ["b"]]}).to_parquet(tmp_path / "l.parquet")
    assert "row 2: a list" in read_error(tmp_path / "l.parquet")


def old_split(prompts, validation, test, seed):
    """The split as it was before prompts written twice were kept together: the rows
    shuffled and cut."""
    shuffled = prompts.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    n = len(shuffled)
    n_val, n_test = int(round(n * validation)), int(round(n * test))
    cuts = {"alignment": (0, n - n_val - n_test), "validation": (n - n_val - n_test, n - n_test)}
    cuts["test"] = (n - n_test, n)
    return {k: shuffled.iloc[a:b].reset_index(drop=True) for k, (a, b) in cuts.items()}


@pytest.mark.parametrize("name", ["arithmetic.jsonl", "arithmetic-large.jsonl"])
def test_the_committed_data_splits_as_before(name):
    prompts = read_prompt_file(REPO / "data" / name, "prompt", "answer", "prompt_id", "solution")
    assert duplicate_prompts(prompts) == {}
    for seed in (1, 2, 42):
        for shares in ((0.2, 0.2), (0.25, 0.25), (0.1, 0.0)):
            new, old = split(prompts, *shares, seed), old_split(prompts, *shares, seed)
            for part in ("alignment", "validation", "test"):
                pd.testing.assert_frame_equal(new[part], old[part])


def test_a_prompt_written_twice_is_in_one_split_only(tmp_path):
    rows = [{"prompt": f"Question {i % 30}?", "id": f"r{i}"} for i in range(60)]  # each twice
    rows += [{"prompt": f"Single {i}?", "id": f"s{i}"} for i in range(40)]
    prompts = read_prompt_file(jsonl(tmp_path / "p.jsonl", *rows), "prompt", id_column="id")
    assert duplicate_prompts(prompts) == {f"Question {i}?": 2 for i in range(30)}
    for seed in range(5):
        parts = split(prompts, 0.2, 0.2, seed)
        seen = {k: set(df["prompt"]) for k, df in parts.items()}
        assert not (seen["alignment"] & seen["validation"] or seen["alignment"] & seen["test"])
        assert not seen["validation"] & seen["test"]
        assert sum(len(df) for df in parts.values()) == 100  # every row kept, with its copies
        assert sorted(pd.concat(parts.values())["prompt_id"]) == sorted(prompts["prompt_id"])
        assert [len(seen[k]) for k in ("alignment", "validation", "test")] == [42, 14, 14]  # of 70
    assert split(prompts, 0.2, 0.2, 3)["test"].equals(split(prompts, 0.2, 0.2, 3)["test"])


def test_the_checks_report_prompts_written_twice(tiny_base, tmp_path):
    rows = [{"prompt": f"Question {i % 20}?"} for i in range(40)] + [{"prompt": "Last?"}]
    path = jsonl(tmp_path / "p.jsonl", *rows)
    prompts = {"file": path, "answer_column": None, "id_column": None, "per_iteration": 6}
    cfg = tiny_config(tiny_base, prompts=prompts, evaluation={"enabled": False}, analysis={"answer": None})
    study = sparta_config.load_study(sparta_config.validate(copy.deepcopy(cfg)), REPO)
    assert study.notes == (
        f"prompt file {path}: 20 prompt(s) written more than once (such as 'Question 0?', 2 times); "
        "each stays in one split with its copies",
    )
    cfg["prompts"]["per_iteration"] = 41  # evaluation off: every row is for alignment
    sparta_config.load_study(copy.deepcopy(cfg), REPO)
    cfg["evaluation"] = {"enabled": True, "tasks": []}
    cfg["prompts"]["per_iteration"] = 30  # 13 of the 21 distinct prompts: at most 26 rows
    with pytest.raises(sparta_config.ConfigError, match=r"prompts.per_iteration \(30\) is larger"):
        sparta_config.load_study(copy.deepcopy(cfg), REPO)
    plain = sparta_config.load_study(copy.deepcopy(tiny_config(tiny_base)), REPO)
    assert plain.notes == ()


def test_a_bad_prompt_file_stops_the_run_naming_it(tiny_base, tmp_path):
    path = jsonl(tmp_path / "p.jsonl", *[{"prompt": f"Q{i}?"} for i in range(30)], {"prompt": 5})
    cfg = tiny_config(tiny_base, prompts={"file": path, "answer_column": None, "id_column": None})
    with pytest.raises(sparta_config.ConfigError, match=r"p\.jsonl: column 'prompt'.*line 31: a number"):
        sparta_config.load(cfg, REPO)


def test_an_sft_file_shorter_than_sft_examples_is_reported(tiny_base, tmp_path):
    domain = tmp_path / "sft" / "addition.jsonl"
    domain.parent.mkdir()
    jsonl(domain, *[{"prompt": f"{i} + 1?", "response": str(i + 1)} for i in range(5)])
    cfg = tiny_config(tiny_base, sft={"data_dir": str(tmp_path / "sft"), "examples": 8})
    cfg["members"][1]["sft_domain"] = "addition"
    with pytest.raises(sparta_config.ConfigError) as e:
        sparta_config.load(cfg, REPO)
    text = str(e.value)
    assert f"members[0] (ann).sft_domain: {domain} has 5 examples but sft.examples is 8" in text
    assert "lower sft.examples to 5" in text and text.count("has 5 examples") == 2, text
    cfg["sft"]["examples"] = 5
    sparta_config.load(cfg, REPO)
    # the embedded files hold the 256 examples the settings' default asks for
    assert len(read_table_file(REPO / "data" / "sft" / "addition.jsonl")) == 256


def long_prompts(tmp_path) -> str:
    """30 short arithmetic prompts and one of ~2,000 characters: longer than the tiny base's
    1,024-token context (its tokenizer reads about a character a token)."""
    rows = [{"prompt_id": f"p{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(30)]
    rows.append({"prompt_id": "long-one", "prompt": "Add these up: " + "1 + " * 500 + "1?", "answer": "501"})
    return jsonl(tmp_path / "p.jsonl", *rows)


def test_a_prompt_longer_than_the_context_is_skipped_or_stops_before_any_job(tiny_base, tmp_path):
    cfg = tiny_config(tiny_base, prompts={"file": long_prompts(tmp_path), "per_iteration": 4})
    study = sparta_config.load_study(sparta_config.validate(copy.deepcopy(cfg)), REPO)
    (note,) = study.notes
    assert "1 of 31 prompts are longer than the 1016 tokens" in note and "long-one" in note
    assert "generation.max_new_tokens (8)" in note and note.endswith("left out (prompts.too_long: skip)")
    cfg["prompts"]["too_long"] = "stop"
    with pytest.raises(sparta_config.ConfigError) as e:
        sparta_config.load_study(copy.deepcopy(cfg), REPO)
    assert "long-one" in str(e.value) and "set prompts.too_long: skip" in str(e.value)
    plain = sparta_config.load_study(copy.deepcopy(tiny_config(tiny_base)), REPO)
    assert plain.notes == ()  # short prompts: no tokenizer loaded, nothing said


@pytest.mark.slow
def test_split_prompts_leaves_out_a_prompt_longer_than_the_context(tiny_base, tmp_path):
    from .workflow_helpers import run_snakemake, write_config

    cfg = tiny_config(tiny_base, prompts={"file": long_prompts(tmp_path), "per_iteration": 4})
    work = tmp_path / "work"
    run_snakemake(work, write_config(tmp_path, cfg), "results/tiny/data/alignment.parquet")
    ids = set()
    for split_name in ("alignment", "validation", "test"):
        ids |= set(pd.read_parquet(work / f"results/tiny/data/{split_name}.parquet")["prompt_id"])
    assert ids == {f"p{i}" for i in range(30)}
    log = (work / "results/tiny/logs/split_prompts.log").read_text()
    assert "1 of 31 prompts are longer than the 1016 tokens" in log


def test_prompts_where_keeps_the_matching_rows(tiny_base, tmp_path):
    rows = [{"prompt": f"Problem {i}?", "level": f"Level {1 + i % 5}"} for i in range(60)]
    path = jsonl(tmp_path / "p.jsonl", *rows)
    easy = read_prompt_file(path, "prompt", where={"level": ["Level 1", "Level 2"]})
    assert len(easy) == 24 and set(easy["prompt"]) == {f"Problem {i}?" for i in range(60) if i % 5 < 2}
    prompts = {
        "file": path,
        "answer_column": None,
        "id_column": None,
        "per_iteration": 6,
        "where": {"level": "Level 3"},
    }
    cfg = tiny_config(tiny_base, prompts=prompts, evaluation={"enabled": False}, analysis={"answer": None})
    sparta_config.load(copy.deepcopy(cfg), REPO)
    cfg["prompts"]["per_iteration"] = 13  # 12 rows of level 3, all for alignment (evaluation off)
    with pytest.raises(sparta_config.ConfigError, match=r"alignment split \(12 of 12 prompts"):
        sparta_config.load(copy.deepcopy(cfg), REPO)
    cfg["prompts"]["where"] = {"grade": "A"}
    with pytest.raises(sparta_config.ConfigError, match="no column 'grade'"):
        sparta_config.load(copy.deepcopy(cfg), REPO)


def normad_like(tmp_path) -> str:
    """NormAd's columns (a CSV on the hub): a story, its contexts, a yes / no / neutral label."""
    rows = pd.DataFrame(
        {
            "ID": range(6),
            "Country": ["japan", "egypt", "peru"] * 2,
            "Rule-of-Thumb": ["Bring a gift."] * 6,
            "Story": [f"At dinner {i}, Ana brought flowers." for i in range(6)],
            "Gold Label": ["yes", "No", "neutral", " YES ", "no", "Neutral"],
        }
    )
    path = tmp_path / "normad.csv"
    rows.to_csv(path, index=False)
    return str(path)


def test_prompts_built_from_columns_and_answers_mapped_to_letters(tmp_path):
    template = (
        "{Story}\nCountry: {Country}\nRule: {Rule-of-Thumb}\nIs this acceptable? A. Yes B. No C. Neutral"
    )
    letters = {"yes": "A", "no": "B", "neutral": "C"}
    table = read_prompt_file(
        normad_like(tmp_path), "Story", "Gold Label", "ID", template=template, answer_map=letters
    )
    assert table["prompt"][0] == (
        "At dinner 0, Ana brought flowers.\nCountry: japan\nRule: Bring a gift.\n"
        "Is this acceptable? A. Yes B. No C. Neutral"
    )
    assert table["answer"].tolist() == ["A", "B", "C", "A", "B", "C"]  # case and spaces ignored
    # the reference (SPIN's chosen answer) from the same column is mapped too; from another, not
    spin = read_prompt_file(
        normad_like(tmp_path),
        "Story",
        "Gold Label",
        "ID",
        "Gold Label",
        template=template,
        answer_map=letters,
    )
    assert spin["reference"].tolist() == spin["answer"].tolist()
    other = read_prompt_file(
        normad_like(tmp_path), "Story", "Gold Label", "ID", "Country", answer_map=letters
    )
    assert other["reference"][0] == "japan"
    with pytest.raises(PromptFileError, match=r"names column\(s\) \['Value'\]"):
        read_prompt_file(normad_like(tmp_path), "Story", template="{Story} {Value}")
    with pytest.raises(PromptFileError, match=r"answer\(s\) \['Neutral', 'neutral'\] are not keys"):
        read_prompt_file(normad_like(tmp_path), "Story", "Gold Label", answer_map={"yes": "A", "no": "B"})


def test_medqa_alignment_prompts_list_the_options_as_evaluation_does(tmp_path):
    """paper-tasks.yaml's MedQA prompts (X) from a row shaped as the hub holds it: the question
    with its lettered options, the same text evaluation's multiple-choice prompt shows (mapping
    cells as such or as JSON text); a row missing an option names its row."""
    import yaml

    from sparta.evaluate import mc_prompt

    p = yaml.safe_load((REPO / "workflow/configs/paper-tasks.yaml").read_text())["study"]["tasks"]["medqa"]
    p = p["prompts"]
    options = [{"A": "Aspirin", "B": "Heparin", "C": "Warfarin", "D": "Rest"}] * 2
    path = tmp_path / "medqa.jsonl"
    rows = [
        {"question": "Which drug?", "options": options[0], "answer_idx": "B", "answer": "Heparin"},
        {"question": "Which one?", "options": json.dumps(options[1]), "answer_idx": "D", "answer": "Rest"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cols = (p["prompt_column"], p["answer_column"], p["id_column"], p["reference_column"])
    table = read_prompt_file(path, *cols, template=p["prompt_template"])
    want = ["Aspirin", "Heparin", "Warfarin", "Rest"]
    assert table["prompt"].tolist() == [mc_prompt("Which drug?", want), mc_prompt("Which one?", want)]
    assert table["answer"].tolist() == table["reference"].tolist() == ["B", "D"]
    rows[1]["options"] = {"A": "x", "B": "y", "C": "z"}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PromptFileError, match="cannot be filled from row 2"):
        read_prompt_file(path, *cols, template=p["prompt_template"])


def test_with_evaluation_off_no_prompt_is_held_out(tiny_base, tmp_path):
    """The README's own pool: 1,000 prompts, 1,000 a round, evaluation off. Nothing evaluates,
    so nothing is held out; with evaluation on, 40% is (validation and test)."""
    path = jsonl(tmp_path / "p.jsonl", *[{"instruction": f"Write about topic {i}."} for i in range(1000)])
    prompts = {"file": path, "prompt_column": "instruction", "answer_column": None, "id_column": None}
    cfg = tiny_config(
        tiny_base,
        prompts={**prompts, "per_iteration": 1000},
        evaluation={"enabled": False},
        analysis={"answer": None},
    )
    run = sparta_config.load(copy.deepcopy(cfg), REPO)
    assert (run.prompts.validation, run.prompts.test) == (0.0, 0.0)
    cfg["evaluation"] = {"enabled": True, "tasks": []}
    with pytest.raises(sparta_config.ConfigError, match=r"alignment split \(600 of 1000 prompts"):
        sparta_config.load(copy.deepcopy(cfg), REPO)
