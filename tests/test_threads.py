"""A model job's thread count beside other busy programs (sparta.logs.fair_threads)."""

import logging
import os
import subprocess
import sys

import pytest

from sparta.logs import busy_elsewhere, fair_threads

CORES = len(os.sched_getaffinity(0))
LOG = logging.getLogger("test")


@pytest.fixture
def busy_cores():
    """A busy process on every core of this process's CPU set."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(CORES)]
    try:
        yield
    finally:
        for p in spin:
            p.kill()
            p.wait()


@pytest.mark.skipif(CORES < 2, reason="one core: nothing to share")
def test_a_job_beside_busy_programs_takes_one_thread(busy_cores, monkeypatch, caplog):
    monkeypatch.delenv("SPARTA_FAIR_THREADS", raising=False)
    assert busy_elsewhere(0.5) >= CORES - 1
    with caplog.at_level(logging.INFO):
        assert fair_threads(CORES, LOG) == 1
    assert f"not {CORES}" in caplog.text and "SPARTA_FAIR_THREADS=0" in caplog.text


@pytest.mark.skipif(CORES < 2, reason="one core: nothing to share")
def test_the_switch_keeps_the_threads_asked_for(busy_cores, monkeypatch):
    monkeypatch.setenv("SPARTA_FAIR_THREADS", "0")
    assert fair_threads(CORES, LOG) == CORES


def test_one_thread_is_not_measured(monkeypatch):
    monkeypatch.setattr("sparta.logs.busy_elsewhere", lambda *a: pytest.fail("measured"))
    assert fair_threads(1, LOG) == 1
