"""Prompt sets: reading a user's file, the embedded arithmetic task, splits, SFT domains.

The embedded default needs no download: ``python -m sparta.data`` writes
``data/arithmetic.jsonl`` (prompts with checkable answers) and ``data/sft/<domain>.jsonl``
(worked examples that give each initial member its own domain), deterministically.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import random
import re
import string
from pathlib import Path

import numpy as np
import pandas as pd

from . import hub, lengths

DOMAINS = ("addition", "subtraction", "multiplication", "word_problems")
NAMES = ("Tom", "Mia", "Sam", "Ana", "Leo", "Zoe", "Ben", "Ivy")
THINGS = ("apples", "books", "coins", "marbles", "stickers", "pencils", "cards", "shells")


class PromptFileError(ValueError):
    """A prompt file that cannot be used; the message names the file and what to fix."""


def _json_records(text: str, path: Path, what: str, lines: bool) -> list[tuple[str, dict]]:
    """(where, record) of each row of a JSON or JSON Lines text; a line that is not valid JSON,
    or a row that is not an object, names its line."""
    if not lines:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            if e.msg == "Extra data" and _json_lines(text):
                raise PromptFileError(
                    f"{what} {path} looks like JSON Lines (one JSON object per line), not one JSON "
                    f"document: rename it {path.with_suffix('.jsonl').name}"
                ) from None
            raise PromptFileError(f"{what} {path}: not valid JSON at line {e.lineno}: {e.msg}") from None
        rows = data if isinstance(data, list) else []
        return [(f"row {i}", r) for i, r in enumerate(rows, start=1) if isinstance(r, dict)]
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptFileError(
                f"{what} {path}: line {number} is not valid JSON ({e.msg}, column {e.colno}): "
                "fix or remove that line (one JSON object per line)"
            ) from None
        if not isinstance(record, dict):
            raise PromptFileError(
                f"{what} {path}: line {number} is not a JSON object ({type(record).__name__}); "
                'write one object per line, such as {"prompt": "..."}'
            )
        records.append((f"line {number}", record))
    return records


def _json_lines(text: str) -> bool:
    """Whether every non-blank line of ``text`` is a JSON object of its own."""
    try:
        return all(isinstance(json.loads(line), dict) for line in text.splitlines() if line.strip())
    except json.JSONDecodeError:
        return False


def read_table_file(path: str | Path, what: str = "prompt file", key: str = "prompts.file") -> pd.DataFrame:
    """A jsonl, json, csv or parquet file as a DataFrame, with errors that name the file (and
    the line, for a JSON line that cannot be read); a UTF-8 byte order mark is accepted."""
    return _read_table(path, what, key)[0]


def _read_table(path: str | Path, what: str, key: str) -> tuple[pd.DataFrame, list | None]:
    """The table of :func:`read_table_file`, and for a JSON file its rows as written (before
    pandas guesses types: "123" stays text) as (where, record) pairs (None for others)."""
    path = Path(path)
    if path.is_dir():
        raise PromptFileError(
            f"{what} {path} is a folder (config key {key}): name a file in it, "
            ".jsonl, .json, .csv or .parquet"
        )
    if not path.is_file():
        raise PromptFileError(f"{what} {path} does not exist (config key {key})")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson", ".json"):
            try:
                text = path.read_text(encoding="utf-8-sig")
            except UnicodeDecodeError as e:
                why = f"{e.reason} at byte {e.start}"
                raise PromptFileError(f"{what} {path} is not UTF-8 text ({why})") from None
            lines = suffix != ".json"
            records = _json_records(text, path, what, lines)
            if lines and not text.strip():
                return pd.DataFrame(), records
            return pd.read_json(io.StringIO(text), lines=lines), records
        if suffix == ".csv":
            return (pd.read_csv(path, encoding="utf-8-sig") if path.stat().st_size else pd.DataFrame()), None
        if suffix == ".parquet":
            return pd.read_parquet(path), None
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, PromptFileError):
            raise
        raise PromptFileError(f"{what} {path} could not be read: {e}") from e
    raise PromptFileError(f"{what} {path}: use .jsonl, .json, .csv or .parquet")


def _kind(value) -> str:
    """What a value that should be text is instead, for a message."""
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, dict):
        return "an object"
    if hasattr(value, "__len__"):
        chat = "" if not len(value) or not isinstance(value[0], dict) else " (chat messages?)"
        return f"a list{chat}"
    return type(value).__name__


def _check_text(df: pd.DataFrame, records, column: str, path: Path, suffix: str, key: str) -> None:
    """Every value of ``column`` is non-empty text, as the file wrote it; else the rows (line
    or row) and what they hold."""
    if records is not None and len(records) == len(df):
        values = [(where, record.get(column)) for where, record in records]
    else:
        row = (lambda i: f"row {i} (line {i + 1})") if suffix == ".csv" else (lambda i: f"row {i}")
        values = [(row(i), v) for i, v in enumerate(df[column].tolist(), start=1)]
    cells = _csv_cells(path, column, len(values)) if suffix == ".csv" else None
    bad = []
    for i, (where, value) in enumerate(values):
        if value is None or (isinstance(value, float) and pd.isna(value)):
            cell = cells[i].strip() if cells is not None else ""
            bad.append(f"{where}: {cell!r}, read as missing" if cell else f"{where}: empty (null)")
        elif isinstance(value, str):
            if not value.strip():
                bad.append(f"{where}: only whitespace" if value else f"{where}: empty text")
        elif suffix == ".csv" and not isinstance(value, (bytes, bytearray)):
            continue  # a csv cell is text, whatever pandas made of it
        else:
            bad.append(f"{where}: {_kind(value)}")
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        why = f" ({CSV_MISSING})" if any(b.endswith("read as missing") for b in bad) else ""
        raise PromptFileError(
            f"prompt file {path}: column {column!r} ({key}) must hold non-empty text in every row; "
            f"{'; '.join(bad[:5])}{more}{why}"
        )


CSV_MISSING = (
    "the CSV reader takes NA, N/A, NaN, null, None and the like for a missing value, quoted or "
    "not: to keep such text as a prompt, write the prompts as .jsonl or .parquet"
)


def _csv_cells(path: Path, column: str, rows: int) -> list[str] | None:
    """The cells of ``column`` of a CSV file as written (no text taken for a missing value);
    None when they cannot be lined up with the rows read."""
    try:
        raw = pd.read_csv(path, encoding="utf-8-sig", dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError):
        return None
    if column not in raw.columns or len(raw) != rows:
        return None
    return raw[column].tolist()


def rows_where(df: pd.DataFrame, where: dict, key: str) -> pd.Series:
    """Which rows of ``df`` match every ``column: value`` (or ``column: [values]``) of
    ``where`` (MATH's difficulty bins: ``{level: [Level 1, Level 2]}``)."""
    keep = pd.Series(True, index=df.index)
    for column, wanted in where.items():
        if column not in df.columns:
            raise PromptFileError(f"{key}: no column {column!r}; columns are {list(df.columns)}")
        values = wanted if isinstance(wanted, list) else [wanted]
        keep &= df[column].isin(values) | df[column].astype(str).isin([str(v) for v in values])
    return keep


def read_prompt_file(
    path: str | Path,
    prompt_column: str,
    answer_column: str | None = None,
    id_column: str | None = None,
    reference_column: str | None = None,
    *,
    where: dict | None = None,
    template: str | None = None,
    answer_map: dict | None = None,
) -> pd.DataFrame:
    """A user's prompts (jsonl, json, csv or parquet) as a prompts table (only the rows that
    match ``where``). ``template`` builds each prompt from its row's columns (``{Story}``: format
    fields named by column); ``answer_map`` maps each answer (case and spaces ignored) to what the
    metric reads (NormAd's yes / no / neutral to option letters), the reference too when it is
    read from the same column."""
    path = Path(path)
    df, records = _read_table(path, "prompt file", "prompts.file")
    if where and len(df):
        df, records = _matching(df, records, where, path)
    if len(df) == 0:
        raise PromptFileError(f"prompt file {path} is empty")
    columns = dict(prompt=prompt_column, answer=answer_column, id=id_column, reference=reference_column)
    for name, col in columns.items():
        if col is not None and col not in df.columns:
            raise PromptFileError(
                f"prompt file {path} has no column {col!r} (prompts.{name}_column); "
                f"columns are {list(df.columns)}"
            )
    _check_text(df, records, prompt_column, path, path.suffix.lower(), "prompts.prompt_column")
    if id_column is not None and df[id_column].isna().any():
        rows = [int(i) + 1 for i in df.index[df[id_column].isna()][:5]]
        raise PromptFileError(f"prompt file {path}: column {id_column!r} is empty (null) in row(s) {rows}")
    prompts = _prompt_texts(df, records, prompt_column, template, path)
    ids = df[id_column].astype(str) if id_column else pd.Series([f"q{i:06d}" for i in range(len(df))])
    if ids.duplicated().any():
        raise PromptFileError(f"prompt file {path}: ids in column {id_column!r} repeat")

    def texts(column):  # a value may be missing (null): that example has none
        return [None if pd.isna(a) else str(a) for a in df[column]] if column else None

    answers, references = texts(answer_column), texts(reference_column)
    if answer_map and answers is not None:
        answers = _mapped(answers, answer_map, path)
        if reference_column == answer_column:  # SPIN's chosen answer: what the metric reads
            references = answers
    return pd.DataFrame(
        {
            "prompt_id": ids.to_numpy(),
            "prompt": prompts.to_numpy(),
            "answer": answers,
            "domain": df["domain"].astype(str).to_numpy() if "domain" in df.columns else "default",
            "reference": references,
        }
    )


def _prompt_texts(df: pd.DataFrame, records, column: str, template: str | None, path: Path) -> pd.Series:
    """Each row's prompt: ``template`` filled with its columns, or the column's text as the file
    wrote it ("123", not 123.0)."""
    if template is not None:
        return pd.Series(_filled(template, df, path), index=df.index)
    if records is not None and len(records) == len(df):
        return pd.Series([record[column] for _, record in records], index=df.index)
    return df[column].astype(str)


def _matching(df: pd.DataFrame, records, where: dict, path: Path) -> tuple[pd.DataFrame, list | None]:
    """The rows of a prompt file (and their records as written) that match ``where``."""
    keep = rows_where(df, where, f"prompt file {path}: where")
    if records is not None and len(records) == len(df):
        records = [r for r, k in zip(records, keep.tolist()) if k]
    df = df.loc[keep].reset_index(drop=True)
    if len(df) == 0:
        raise PromptFileError(f"prompt file {path}: no row matches where {where}")
    return df, records


def _filled(template: str, df: pd.DataFrame, path: Path) -> list[str]:
    """``template`` filled with each row's columns (a missing value: empty text). A field may
    index into a mapping or list column (``{options[A]}``: MedQA's lettered options), held
    as such or as its JSON text."""
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f}
    column_of = {f: re.split(r"[\[.]", f, maxsplit=1)[0] for f in fields}  # {options[A]}: options
    used = set(column_of.values())
    missing = sorted(used - set(df.columns))
    if missing:
        raise PromptFileError(
            f"prompt file {path}: prompt_template names column(s) {missing} it does not have; "
            f"columns are {list(df.columns)}"
        )
    indexed = {column for f, column in column_of.items() if f != column}
    rows = df[sorted(used)].astype(object).where(df[sorted(used)].notna(), "")
    out = []
    for n, row in enumerate(rows.to_dict("records"), 1):
        for column in indexed:
            if isinstance(row[column], str) and row[column][:1] in "{[":
                row[column] = json.loads(row[column])
        try:
            out.append(template.format_map(row))
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise PromptFileError(
                f"prompt file {path}: prompt_template cannot be filled from row {n} ({type(e).__name__}: {e})"
            ) from None
    return out


def _mapped(answers: list, answer_map: dict, path: Path) -> list:
    """Each answer through ``answer_map`` (keys compared without case or outer spaces)."""
    table = {str(k).strip().lower(): str(v) for k, v in answer_map.items()}
    unknown = sorted({a for a in answers if a is not None and a.strip().lower() not in table})
    if unknown:
        raise PromptFileError(
            f"prompt file {path}: answer(s) {unknown[:5]} are not keys of answer_map {sorted(table)}"
        )
    return [None if a is None else table[a.strip().lower()] for a in answers]


def duplicate_prompts(prompts: pd.DataFrame) -> dict[str, int]:
    """Prompt text -> how many rows hold it, for every prompt written more than once."""
    counts = prompts["prompt"].value_counts()
    return {str(p): int(n) for p, n in counts[counts > 1].items()}


def split_sizes(n: int, validation: float, test: float) -> tuple[int, int, int]:
    """Prompts in (alignment, validation, test) of n prompts split with these shares."""
    n_val, n_test = int(round(n * validation)), int(round(n * test))
    return n - n_val - n_test, n_val, n_test


def split(prompts: pd.DataFrame, validation: float, test: float, seed: int) -> dict[str, pd.DataFrame]:
    """Shuffle the distinct prompts with a fixed seed, then cut them into alignment /
    validation / test; every row of a prompt written more than once follows its first row,
    so no prompt is in two splits. (Without repeats: the rows themselves, shuffled and cut.)"""
    unique = prompts.drop_duplicates("prompt")
    shuffled = unique.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    n = len(shuffled)
    _, n_val, n_test = split_sizes(n, validation, test)
    if n - n_val - n_test < 1:
        raise PromptFileError(f"only {n} distinct prompts: nothing left for alignment after the splits")
    parts = {
        "alignment": shuffled.iloc[: n - n_val - n_test].reset_index(drop=True),
        "validation": shuffled.iloc[n - n_val - n_test : n - n_test].reset_index(drop=True),
        "test": shuffled.iloc[n - n_test :].reset_index(drop=True),
    }
    if len(unique) == len(prompts):
        return parts
    out = {}
    for name, part in parts.items():
        order = {p: i for i, p in enumerate(part["prompt"])}
        rows = prompts[prompts["prompt"].isin(order)]
        rank = rows["prompt"].map(order).to_numpy()
        out[name] = rows.iloc[np.argsort(rank, kind="stable")].reset_index(drop=True)
    return out


def _problem(domain: str, rng: random.Random, wide: bool = False) -> tuple[str, int, str]:
    """(question, answer, worked solution) of one problem of a domain; ``wide``: larger numbers,
    so that many more distinct problems exist (the power study's 1,200)."""
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
            how = f"{name} starts with {a} and gets {b} more, so {a} + {b} = {a + b}."
            return q, a + b, f"{how} The answer is {a + b}."
        a, b = max(a, b) + min(a, b), min(a, b)
        q = f"{name} has {a} {thing} and gives away {b}. How many {thing} does {name} have left?"
        how = f"{name} starts with {a} and gives away {b}, so {a} - {b} = {a - b}."
        return q, a - b, f"{how} The answer is {a - b}."
    raise ValueError(f"unknown domain {domain!r}; known: {DOMAINS}")


def _distinct_prompts(n: int, what: str, prefix: str, make) -> pd.DataFrame:
    """``n`` distinct prompts of the four domains in turn, ``make(domain)`` giving each row."""
    rows, seen = [], set()
    for _ in range(100 * n):
        if len(rows) == n:
            break
        row = make(DOMAINS[len(rows) % len(DOMAINS)])
        if row["prompt"] in seen:
            continue
        seen.add(row["prompt"])
        rows.append({"prompt_id": f"{prefix}-{len(rows):04d}", **row})
    if len(rows) < n:
        raise ValueError(f"could only make {len(rows)} distinct {what} prompts, asked for {n}")
    return pd.DataFrame(rows)


def arithmetic_prompts(n: int, seed: int, wide: bool = False) -> pd.DataFrame:
    rng = random.Random(seed)

    def make(domain):
        q, ans, solution = _problem(domain, rng, wide)
        return {"prompt": q, "answer": str(ans), "domain": domain, "solution": solution}

    return _distinct_prompts(n, "arithmetic", "arith", make)


REWORDED = {
    "addition": (
        "Find the sum of {a} and {b}.",
        "Add {b} to {a}. What number do you get?",
        "If you combine {a} and {b}, what is the total?",
    ),
    "subtraction": (
        "Take {b} away from {a}. What is left?",
        "Find the difference between {a} and {b}.",
        "Subtract {b} from {a}. What number do you get?",
    ),
    "multiplication": (
        "Find the product of {a} and {b}.",
        "Multiply {a} by {b}. What number do you get?",
        "There are {a} boxes with {b} eggs in each box. How many eggs are there in all?",
    ),
    "word_problems": (
        "A shelf holds {a} jars. Someone puts {b} more jars on it. How many jars are on the shelf now?",
        "A baker made {a} rolls and sold {b} of them. How many rolls remain?",
        "There were {a} birds on a fence; {b} flew away. How many birds are still on the fence?",
    ),
}
"""Arithmetic worded as the training prompts never are (``data/arithmetic-reworded.jsonl``): the
evaluation task off the training distribution. Word problems take the first template's sum or
one of the other two's difference."""


def reworded_prompts(n: int, seed: int) -> pd.DataFrame:
    """``n`` distinct problems of the four domains in turn, each through one of its
    :data:`REWORDED` templates, with the numbers of the wide problems (``_problem``'s)."""
    rng = random.Random(f"{seed}-reworded")

    def make(domain):
        k = rng.randrange(len(REWORDED[domain]))
        a, b = _operands(domain, k, rng)
        answer = a * b if domain == "multiplication" else a + b if _adds(domain, k) else a - b
        return {"prompt": REWORDED[domain][k].format(a=a, b=b), "answer": str(answer), "domain": domain}

    return _distinct_prompts(n, "reworded", "reword", make)


def _adds(domain: str, k: int) -> bool:
    return domain == "addition" or (domain == "word_problems" and k == 0)


def _operands(domain: str, k: int, rng: random.Random) -> tuple[int, int]:
    """Two numbers in the wide problems' ranges; a difference's first is the larger."""
    if domain == "multiplication":
        return rng.randint(2, 30), rng.randint(2, 12)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    if rng.random() < 0.5:
        a, b = rng.randint(10, 99), rng.randint(2, 9)
    if not _adds(domain, k):
        a, b = max(a, b) + min(a, b), min(a, b)
    return a, b


def sft_examples(domain: str, n: int, seed: int) -> pd.DataFrame:
    rng = random.Random(f"{seed}-{domain}")
    rows = [_problem(domain, rng) for _ in range(n)]
    return pd.DataFrame({"prompt": [q for q, _, _ in rows], "response": [s for _, _, s in rows]})


def write_jsonl(df: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in df.to_dict(orient="records")))


def main(argv=None):
    ap = argparse.ArgumentParser(description="write the embedded default's data files")
    ap.add_argument("--out", default="data")
    ap.add_argument("--prompts", type=int, default=400)
    ap.add_argument("--sft", type=int, default=256)
    ap.add_argument("--large", type=int, default=1200, help="prompts of arithmetic-large.jsonl (wide)")
    ap.add_argument("--reworded", type=int, default=400, help="prompts of arithmetic-reworded.jsonl")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)
    out = Path(args.out)
    write_jsonl(arithmetic_prompts(args.prompts, args.seed), out / "arithmetic.jsonl")
    write_jsonl(arithmetic_prompts(args.large, args.seed, wide=True), out / "arithmetic-large.jsonl")
    write_jsonl(reworded_prompts(args.reworded, args.seed), out / "arithmetic-reworded.jsonl")
    for d in DOMAINS:
        write_jsonl(sft_examples(d, args.sft, args.seed + 1), out / "sft" / f"{d}.jsonl")


# --- the config check: the prompt set and the members' SFT data --------------------------------


@functools.cache
def _read_once(path: str, stamp: tuple | None, *columns):
    *names, shaped = columns
    try:
        return read_prompt_file(Path(path), *names, **json.loads(shaped))
    except PromptFileError as e:
        return e


def _prompts(path: Path, *columns):
    """read_prompt_file once per file version and columns (a study checks every run's): the
    table, or the PromptFileError it raised."""
    try:
        stamp = (path.stat().st_mtime_ns, path.stat().st_size)
    except OSError:
        stamp = None
    return _read_once(str(path.resolve()), stamp, *columns)


def prompt_problems(settings, root: Path, notes: list[str]) -> list[str]:
    """The prompt set: its file (or hub dataset), prompts too long for the bases' contexts,
    prompts written twice (a note), splits that leave prompts for alignment."""
    p = settings.prompts
    found = hub.source_problems(p, "prompts", root, notes)
    if found is not None:
        return found
    shaped = json.dumps(
        {"where": p.where, "template": p.prompt_template, "answer_map": p.answer_map}, sort_keys=True
    )
    prompts = _prompts(
        root / p.source_file(), p.prompt_column, p.answer_column, p.id_column, p.reference_column, shaped
    )
    if isinstance(prompts, PromptFileError):
        return [str(prompts)]
    budget = lengths.prompt_budget(lengths.prompt_bases(settings), settings.generation.max_new_tokens, root)
    try:
        prompts, skipped = lengths.apply(prompts, budget, settings.system_prompt, p.too_long, "prompts")
    except lengths.PromptTooLong as e:
        return [str(e)]
    except (OSError, ValueError):  # no tokenizer to count with yet: rule split_prompts counts
        skipped = None
    if skipped:
        notes.append(skipped)
    repeated = duplicate_prompts(prompts)
    if repeated:
        text, times = next(iter(repeated.items()))
        example = text if len(text) <= 60 else text[:57] + "..."
        notes.append(
            f"prompt file {root / p.source_file()}: {len(repeated)} prompt(s) written more than once "
            f"(such as {example!r}, {times} times); each stays in one split with its copies"
        )
    distinct = len(prompts) - sum(repeated.values()) + len(repeated)
    n_align, n_val, n_test = split_sizes(distinct, p.validation, p.test)
    if n_align < 1:
        return [
            f"prompts.validation + prompts.test ({p.validation} + {p.test}) leave none of the "
            f"{distinct} prompts for alignment: lower them"
        ]
    if repeated:  # the rows of the alignment split, copies included
        n_align = len(split(prompts, p.validation, p.test, settings.seed)["alignment"])
    if p.per_iteration > n_align:
        return [
            f"prompts.per_iteration ({p.per_iteration}) is larger than the alignment split ({n_align} "
            f"of {len(prompts)} prompts after {n_val} validation and {n_test} test): lower it or add prompts"
        ]
    return []


if __name__ == "__main__":
    main()
