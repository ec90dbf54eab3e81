"""docs/results.md: every table of measured figures names, on each row, the command that
reproduces the figure, the machine, the date (YYYY-MM-DD) and the commit (one this
repository has). A table with any of those columns has all four, and no table row stands
outside a table (a row after a blank line renders as plain text, not as a row of its table).
Fast: the page is parsed as text; git answers for all commits at once."""

from __future__ import annotations

import datetime
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results.md"
PROVENANCE = ("command", "machine", "date", "commit")
COMMIT = re.compile(r"[0-9a-f]{7,40}")
SEPARATOR = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")


@dataclass
class Table:
    line: int  # 1-based line of the header row (of the first row for rows without a header)
    header: list[str]
    rows: list[tuple[int, list[str]]]


def cells(row: str) -> list[str]:
    """A table row's cells: split on the pipes outside code spans and not escaped."""
    out, cell, code = [], [], False
    text = row.strip()
    text = text[1:] if text.startswith("|") else text
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cell.append(text[i : i + 2])
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append("".join(cell).strip())
            cell = []
        else:
            cell.append(ch)
        i += 1
    if "".join(cell).strip():
        out.append("".join(cell).strip())
    return out


def tables(text: str) -> list[Table]:
    """The Markdown tables of a page outside fenced code blocks; a run of pipe lines without
    a header and separator row comes back with an empty header."""
    found: list[Table] = []
    lines = text.splitlines()
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or not line.startswith("|"):
            i += 1
            continue
        block = []
        while i < len(lines) and lines[i].strip().startswith("|"):
            block.append((i + 1, lines[i]))
            i += 1
        if len(block) >= 2 and SEPARATOR.fullmatch(block[1][1].strip()):
            header = [c.lower() for c in cells(block[0][1])]
            found.append(Table(block[0][0], header, [(n, cells(r)) for n, r in block[2:]]))
        else:
            found.append(Table(block[0][0], [], [(n, cells(r)) for n, r in block]))
    return found


def problems(text: str, known_commit=None) -> list[str]:
    """What a page's tables lack: rows outside a table; tables with some but not all of the
    provenance columns; rows of a provenance table with an empty command or machine, a date
    that is not YYYY-MM-DD, a commit that is not 7-40 hex digits or (``known_commit``, a
    callable taking the set of commits and returning the missing ones) not in the repository."""
    found, commits = [], {}
    for table in tables(text):
        if not table.header:
            found.append(f"line {table.line}: table rows without a header row (after a blank line?)")
            continue
        named = [c for c in PROVENANCE if c in table.header]
        if not named:
            continue
        if len(named) < len(PROVENANCE):
            missing = ", ".join(c for c in PROVENANCE if c not in named)
            found.append(f"line {table.line}: a table with {', '.join(named)} but no {missing} column")
            continue
        at = {c: table.header.index(c) for c in PROVENANCE}
        for n, row in table.rows:
            if len(row) != len(table.header):
                found.append(f"line {n}: {len(row)} cells, the header has {len(table.header)}")
                continue
            for column in ("command", "machine"):
                if not row[at[column]]:
                    found.append(f"line {n}: no {column}")
            date = row[at["date"]]
            try:
                ok = bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", date)) and datetime.date.fromisoformat(date)
            except ValueError:
                ok = False
            if not ok:
                found.append(f"line {n}: date {date!r} is not YYYY-MM-DD")
            commit = row[at["commit"]].strip("`")
            if not COMMIT.fullmatch(commit):
                found.append(f"line {n}: commit {commit!r} is not 7-40 hex digits")
            else:
                commits.setdefault(commit, n)
    if known_commit is not None and commits:
        for commit in sorted(known_commit(set(commits))):
            found.append(f"line {commits[commit]}: commit {commit} is not in this repository")
    return found


def missing_commits(commits: set[str]) -> set[str]:
    """Those of ``commits`` that are not commits of this repository (one git call)."""
    names = sorted(commits)
    out = subprocess.run(
        ["git", "cat-file", "--batch-check"],
        input="".join(f"{c}^{{commit}}\n" for c in names),
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {c for c, answer in zip(names, out) if answer.split()[1:2] != ["commit"]}


def full_history() -> bool:
    """Whether git can answer for old commits here: a git work tree, not a shallow clone."""
    if shutil.which("git") is None:
        return False
    run = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True, text=True
    )
    return run.returncode == 0 and run.stdout.strip() == "false"


def test_every_figure_row_names_its_command_machine_date_and_commit():
    text = RESULTS.read_text()
    with_provenance = [t for t in tables(text) if set(PROVENANCE) <= set(t.header)]
    assert len(with_provenance) >= 3, "the parser found too few tables of figures on the page"
    assert sum(len(t.rows) for t in with_provenance) >= 10
    assert problems(text) == []


def test_every_commit_on_the_page_is_in_the_repository():
    if not full_history():
        pytest.skip("no git, or a shallow clone: the commits cannot be looked up")
    assert problems(RESULTS.read_text(), missing_commits) == []


GOOD = """\
| claim | figure | command | machine | date | commit |
|---|---|---|---|---|---|
| a speed | **2x** | `python bench.py --a \\| b` | 2 cores | 2026-12-05 | 1c97c5c |
"""


def test_a_planted_row_without_a_commit_fails():
    assert problems(GOOD) == []
    planted = GOOD + "| another speed | 3x | `python bench.py` | 2 cores | 2026-12-05 |  |\n"
    assert problems(planted) == ["line 4: commit '' is not 7-40 hex digits"]


@pytest.mark.parametrize(
    "row, expected",
    [
        ("| x | 1 |  | 2 cores | 2026-12-05 | 1c97c5c |", "no command"),
        ("| x | 1 | `cmd` |  | 2026-12-05 | 1c97c5c |", "no machine"),
        ("| x | 1 | `cmd` | 2 cores | 5 Dec 2026 | 1c97c5c |", "is not YYYY-MM-DD"),
        ("| x | 1 | `cmd` | 2 cores | 2026-13-05 | 1c97c5c |", "is not YYYY-MM-DD"),
        ("| x | 1 | `cmd` | 2 cores | 2026-12-05 | HEAD |", "is not 7-40 hex digits"),
        ("| x | 1 | `cmd` | 2 cores | 2026-12-05 |", "5 cells, the header has 6"),
    ],
)
def test_a_planted_row_lacking_a_field_fails(row, expected):
    found = problems(GOOD + row + "\n")
    assert len(found) == 1 and expected in found[0], found


def test_a_table_with_some_provenance_columns_has_all_four():
    partial = "| what | figure | date |\n|---|---|---|\n| a speed | 2x | 2026-12-05 |\n"
    assert problems(partial) == ["line 1: a table with date but no command, machine, commit column"]


def test_rows_after_a_blank_line_are_not_a_table():
    split = GOOD + "\n| a speed | 2x | `cmd` | 2 cores | 2026-12-05 | 1c97c5c |\n"
    assert problems(split) == ["line 5: table rows without a header row (after a blank line?)"]


def test_a_commit_git_does_not_know_fails():
    if not full_history():
        pytest.skip("no git, or a shallow clone: the commits cannot be looked up")
    unknown = GOOD.replace("1c97c5c", "0000000")
    assert problems(unknown, missing_commits) == ["line 3: commit 0000000 is not in this repository"]


def test_code_blocks_are_not_tables():
    fenced = "```\n| date | commit |\n|---|---|\n| x | y |\n```\n"
    assert problems(fenced) == []
