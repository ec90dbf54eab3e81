"""A long job's finished parts kept beside its outputs (sparta/progress.py): a retry after a
time limit, a requeue or a kill goes on from the next part, with the result of a run that was
never interrupted; other inputs start afresh."""

import os
import time

import pandas as pd
import pytest

from sparta.progress import Progress, adapter_stamp, run_parts

NAMES = ["arithmetic", "gsm8k", "truthfulqa"]


def part(i):
    return pd.DataFrame({"item": range(3), "score": [i + 0.5 * k for k in range(3)], "task": NAMES[i]})


def test_a_retry_goes_on_from_the_next_part_with_the_same_result(tmp_path):
    whole = run_parts(NAMES, part, None)
    calls = []

    def killed_at_the_second(i):
        calls.append(i)
        if i == 1:
            raise TimeoutError("the job's time limit")
        return part(i)

    with pytest.raises(TimeoutError):
        run_parts(NAMES, killed_at_the_second, Progress(tmp_path / "p", ["inputs"]))
    calls.clear()
    said = []
    resumed = run_parts(
        NAMES, lambda i: calls.append(i) or part(i), Progress(tmp_path / "p", ["inputs"]), said.append
    )
    assert calls == [1, 2]  # the first part is not run again
    assert len(said) == 1 and said[0].startswith("arithmetic: finished by an earlier attempt")
    for a, b in zip(whole, resumed):
        pd.testing.assert_frame_equal(a, b)


def test_other_inputs_start_afresh_and_done_removes_the_progress(tmp_path):
    p = Progress(tmp_path / "p", ["a"])
    p.put("000-arithmetic", part(0))
    assert Progress(tmp_path / "p", ["a"]).parts() == ["000-arithmetic"]
    assert Progress(tmp_path / "p", ["b"]).parts() == []  # other inputs: emptied
    p = Progress(tmp_path / "p", ["b"])
    p.done()
    assert not (tmp_path / "p").exists()


def test_a_rewritten_adapter_is_another_input(tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"x" * 10)
    before = adapter_stamp(str(folder))
    time.sleep(0.01)
    (folder / "adapter_model.safetensors").write_bytes(b"y" * 10)
    os.utime(folder / "adapter_model.safetensors", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert adapter_stamp(str(folder)) != before
    assert adapter_stamp(None) == [None]


def test_an_attempt_superseded_by_a_later_one_stops_before_it_writes(tmp_path, monkeypatch):
    """Two copies of one job (the first outlived its time limit beside its retry): the later
    claims the folder; the earlier stops at its next part, and before its outputs, without
    writing; the later one's parts are what is kept."""
    from sparta import progress as module

    folder = tmp_path / "p"
    first = Progress(folder, ["same inputs"])
    first.put("000-a", part(0))
    monkeypatch.setattr(module.os, "getpid", lambda: 999999)  # another process's claim
    later = Progress(folder, ["same inputs"])
    assert later.get("000-a") is not None  # the same inputs: the first's finished part is kept
    with pytest.raises(module.Superseded, match="pid 999999"):
        first.put("001-b", part(1))
    with pytest.raises(module.Superseded):
        first.check()
    assert later.parts() == ["000-a"]
    later.put("001-b", part(1))
    later.check()
    later.done()
    with pytest.raises(module.Superseded, match="finished and removed"):
        first.check()


def test_a_judge_job_goes_on_from_its_next_block_of_judgments(tmp_path, monkeypatch):
    """A judge job (sparta.methods.JudgeRun) keeps each finished block of judgments: killed in
    its third block, the retry judges only from there, and every judgment equals an
    uninterrupted job's (the blocks are the same either way)."""
    from types import SimpleNamespace

    from sparta.judging import JudgeItem, Judgment
    from sparta.members import MemberSpec
    from sparta.methods import JudgeRun, base

    monkeypatch.setattr(base, "BLOCK", 4)
    specs = [MemberSpec("ann", "b1"), MemberSpec("bob", "b2")]
    asked = [(specs[i % 2], f"d{i}", i, JudgeItem(f"q{i}", f"answer {i}")) for i in range(11)]
    calls = []

    def judge_fn(served, items, cfg, system, seeds, limit=None):
        calls.append(len(items))
        if limit is not None and len(calls) > limit:
            raise TimeoutError("the job's time limit")
        return [
            Judgment(1 + (s % 9) + 0.1 / 3, f"raw {x.response}", None, False, tokens=7)
            for x, s in zip(items, seeds)
        ]

    def job(progress, limit=None):
        empty = pd.DataFrame({"duel_id": [], "member": [], "sample": [], "response": [], "answer": []})
        run = JudgeRun(
            specs,
            empty,
            empty,
            SimpleNamespace(kind="model"),
            "sys",
            None,
            backend=SimpleNamespace(serve_each=lambda members: members),
            seed=None,
            progress=progress,
        )
        return run.judged(asked, judge_fn, None, lambda i: 1000 + i, limit)

    whole = job(None)
    calls.clear()
    with pytest.raises(TimeoutError):
        job(Progress(tmp_path / "p", ["inputs"]), limit=4)  # blocks of 4, 4, 3 asked; 2 bases each
    assert len(Progress(tmp_path / "p", ["inputs"]).parts()) == 2
    calls.clear()
    assert job(Progress(tmp_path / "p", ["inputs"])) == whole
    assert sum(calls) == 3 + 1  # only the third block again (3 items, 2 calls, the odd one padded)
