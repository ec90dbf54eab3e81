"""Prompt sets: reading a user's file, the embedded arithmetic task, splits, SFT domains.

The embedded default needs no download: ``python -m sparta.data`` writes
``data/arithmetic.jsonl`` (prompts with checkable answers) and ``data/sft/<domain>.jsonl``
(worked examples that give each initial member its own domain), deterministically.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pandas as pd

DOMAINS = ("addition", "subtraction", "multiplication", "word_problems")
NAMES = ("Tom", "Mia", "Sam", "Ana", "Leo", "Zoe", "Ben", "Ivy")
THINGS = ("apples", "books", "coins", "marbles", "stickers", "pencils", "cards", "shells")


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message names the file and what to fix."""


def read_table_file(path: str | Path, what: str = "prompt file", key: str = "prompts.file") -> pd.DataFrame:
    """A jsonl, json, csv or parquet file as a DataFrame, with errors that name the file."""
    path = Path(path)
    if not path.is_file():
        raise PromptFileError(f"{what} {path} does not exist (config key {key})")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson"):
            return pd.read_json(path, lines=True) if path.stat().st_size else pd.DataFrame()
        if suffix == ".json":
            return pd.read_json(path)
        if suffix == ".csv":
            return pd.read_csv(path) if path.stat().st_size else pd.DataFrame()
        if suffix == ".parquet":
            return pd.read_parquet(path)
    except ValueError as e:
        raise PromptFileError(f"{what} {path} could not be read: {e}") from e
    raise PromptFileError(f"{what} {path}: use .jsonl, .json, .csv or .parquet")


def read_prompt_file(
    path: str | Path,
    prompt_column: str,
    answer_column: str | None = None,
    id_column: str | None = None,
    reference_column: str | None = None,
) -> pd.DataFrame:
    """A user's prompts (jsonl, json, csv or parquet) as a prompts table."""
    path = Path(path)
    df = read_table_file(path)
    if len(df) == 0:
        raise PromptFileError(f"prompt file {path} is empty")
    for key, col in (
        ("prompts.prompt_column", prompt_column),
        ("prompts.answer_column", answer_column),
        ("prompts.id_column", id_column),
        ("prompts.reference_column", reference_column),
    ):
        if col is not None and col not in df.columns:
            raise PromptFileError(
                f"prompt file {path} has no column {col!r} ({key}); columns are {list(df.columns)}"
            )
    for col in (prompt_column, id_column):
        if col is not None and df[col].isna().any():
            rows = [int(i) + 1 for i in df.index[df[col].isna()][:5]]
            raise PromptFileError(f"prompt file {path}: column {col!r} is empty (null) in row(s) {rows}")
    prompts = df[prompt_column].astype(str)
    if (prompts.str.strip() == "").any():
        raise PromptFileError(f"prompt file {path}: column {prompt_column!r} has empty prompts")
    ids = df[id_column].astype(str) if id_column else pd.Series([f"q{i:06d}" for i in range(len(df))])
    if ids.duplicated().any():
        raise PromptFileError(f"prompt file {path}: ids in column {id_column!r} repeat")

    def texts(column):  # a value may be missing (null): that example has none
        return [None if pd.isna(a) else str(a) for a in df[column]] if column else None

    answers, references = texts(answer_column), texts(reference_column)
    return pd.DataFrame(
        {
            "prompt_id": ids.to_numpy(),
            "prompt": prompts.to_numpy(),
            "answer": answers,
            "domain": df["domain"].astype(str).to_numpy() if "domain" in df.columns else "default",
            "reference": references,
        }
    )


def split_sizes(n: int, validation: float, test: float) -> tuple[int, int, int]:
    """Prompts in (alignment, validation, test) of n prompts split with these shares."""
    n_val, n_test = int(round(n * validation)), int(round(n * test))
    return n - n_val - n_test, n_val, n_test


def split(prompts: pd.DataFrame, validation: float, test: float, seed: int) -> dict[str, pd.DataFrame]:
    """Shuffle with a fixed seed, then cut into alignment / validation / test."""
    shuffled = prompts.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    n = len(shuffled)
    _, n_val, n_test = split_sizes(n, validation, test)
    if n - n_val - n_test < 1:
        raise PromptFileError(f"only {n} prompts: nothing left for alignment after the splits")
    return {
        "alignment": shuffled.iloc[: n - n_val - n_test].reset_index(drop=True),
        "validation": shuffled.iloc[n - n_val - n_test : n - n_test].reset_index(drop=True),
        "test": shuffled.iloc[n - n_test :].reset_index(drop=True),
    }


def _problem(domain: str, rng: random.Random, wide: bool = False) -> tuple[str, int, str]:
    """(question, answer, worked solution) of one problem of a domain; ``wide``: larger
    numbers (two-digit sums and differences more often, products up to 30 x 12), so that
    many more distinct problems exist (the power study's 1,200)."""
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    if rng.random() < (0.5 if wide else 0.3):
        a, b = rng.randint(10, 99 if wide else 49), rng.randint(2, 9)
    if domain == "addition":
        return f"What is {a} + {b}?", a + b, f"{a} + {b} = {a + b}. The answer is {a + b}."
    if domain == "subtraction":
        a, b = max(a, b) + min(a, b), min(a, b)
        return f"What is {a} - {b}?", a - b, f"{a} - {b} = {a - b}. The answer is {a - b}."
    if domain == "multiplication":
        a, b = (rng.randint(2, 30), rng.randint(2, 12)) if wide else (rng.randint(2, 15), rng.randint(2, 9))
        return f"What is {a} * {b}?", a * b, f"{a} * {b} = {a * b}. The answer is {a * b}."
    if domain == "word_problems":
        name, thing = rng.choice(NAMES), rng.choice(THINGS)
        if rng.random() < 0.5:
            q = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
            return (
                q,
                a + b,
                f"{name} starts with {a} and gets {b} more, so {a} + {b} = {a + b}. The answer is {a + b}.",
            )
        a, b = max(a, b) + min(a, b), min(a, b)
        q = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?"
        return (
            q,
            a - b,
            f"{name} starts with {a} and gives away {b}, so {a} - {b} = {a - b}. The answer is {a - b}.",
        )
    raise ValueError(f"unknown domain {domain!r}; known: {DOMAINS}")


def arithmetic_prompts(n: int, seed: int, wide: bool = False) -> pd.DataFrame:
    rng = random.Random(seed)
    rows, seen = [], set()
    for _ in range(100 * n):
        if len(rows) == n:
            break
        domain = DOMAINS[len(rows) % len(DOMAINS)]
        q, ans, solution = _problem(domain, rng, wide)
        if q in seen:
            continue
        seen.add(q)
        rows.append(
            {
                "prompt_id": f"arith-{len(rows):04d}",
                "prompt": q,
                "answer": str(ans),
                "domain": domain,
                "solution": solution,
            }
        )
    if len(rows) < n:
        raise ValueError(f"could only make {len(rows)} distinct arithmetic prompts, asked for {n}")
    return pd.DataFrame(rows)


def sft_examples(domain: str, n: int, seed: int) -> pd.DataFrame:
    rng = random.Random(f"{seed}-{domain}")
    rows = [_problem(domain, rng) for _ in range(n)]
    return pd.DataFrame({"prompt": [q for q, _, _ in rows], "response": [s for _, _, s in rows]})


def write_jsonl(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in df.to_dict(orient="records"):
            f.write(json.dumps(row) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description="write the embedded default's data files")
    ap.add_argument("--out", default="data")
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--sft", type=int, default=256)
    ap.add_argument("--large", type=int, default=1200, help="prompts of arithmetic-large.jsonl (wide)")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)
    out = Path(args.out)
    write_jsonl(arithmetic_prompts(args.prompts, args.seed), out / "arithmetic.jsonl")
    write_jsonl(arithmetic_prompts(args.large, args.seed, wide=True), out / "arithmetic-large.jsonl")
    for d in DOMAINS:
        write_jsonl(sft_examples(d, args.sft, args.seed + 1), out / "sft" / f"{d}.jsonl")


if __name__ == "__main__":
    main()
