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
