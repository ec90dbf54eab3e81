"""Answer extraction and task metrics, pure: no model, no heavy import.

- numbers: GSM8K's ``#### N`` first, else the last number in the text (commas, signs,
  decimals and a trailing period handled);
- MATH: the last ``\\boxed{...}`` (nested braces handled);
- multiple choice: the option letter the text commits to;
- TruthfulQA MC1/MC2 from the log-likelihoods of the options;
- preference-label accuracy of peer judging against ground truth.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import pandas as pd

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?|-?\$?\.\d+")
_HASHES = re.compile(r"####\s*(-?\$?[\d,]*\.?\d+)")


def normalize_number(text: str | None) -> str | None:
    """Canonical form of a number: no commas or $, no trailing zeros, integers without '.0'."""
    if text is None:
        return None
    s = str(text).strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        value = float(s)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return str(int(value)) if value == int(value) else repr(value)


def extract_number(text: str) -> str | None:
    """GSM8K style: the number after ``####`` if present, else the last number in the text."""
    m = _HASHES.search(text)
    if m:
        return normalize_number(m.group(1))
    found = _NUMBER.findall(text)
    # a comma followed by a space separates numbers ("3, 4"); inside a number it groups digits
    return normalize_number(found[-1]) if found else None


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), nested braces included."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    i = starts[-1]
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


def normalize_math(answer: str | None) -> str | None:
    if answer is None:
        return None
    s = answer.strip().strip("$").replace(" ", "").replace("\\left", "").replace("\\right", "")
    s = s.replace("\\!", "").replace("dfrac", "frac").replace("tfrac", "frac").rstrip(".")
    return normalize_number(s) or s


def exact_match(prediction: str, answer: str, kind: str = "number") -> bool:
    """Pass@1 exact match of one prediction against the reference answer."""
    if kind == "number":
        got, want = extract_number(prediction), normalize_number(extract_number(str(answer)) or answer)
    elif kind == "boxed":
        got = normalize_math(extract_boxed(prediction))
        want = normalize_math(extract_boxed(str(answer)) or str(answer))
    else:
        raise ValueError(f"unknown answer kind {kind!r}; use number or boxed")
    return got is not None and got == want


_CHOICE_PATTERNS = [
    r"answer\s*(?:is|:)?\s*\(?([A-{L}])\)?(?![A-Za-z])",
    r"^\s*\(?([A-{L}])[\).:](?:\s|$)",
    r"\(([A-{L}])\)",
    r"(?<![A-Za-z])([A-{L}])(?![A-Za-z])",
]


def extract_choice(text: str, n_options: int = 5) -> str | None:
    """The option letter a text commits to: 'the answer is (B)', 'B.', '(B)', or a lone B."""
    last = chr(ord("A") + n_options - 1)
    for pattern in _CHOICE_PATTERNS:
        m = re.search(pattern.replace("{L}", last), text, flags=re.M | re.I if "answer" in pattern else re.M)
        if m:
            return m.group(1).upper()
    return None


def mc1_mc2(logprobs: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """TruthfulQA MC1 and MC2 from the summed log-likelihood of each option.

    MC1: 1 if the single best option is a true one (labels 1 = true, 0 = false).
    MC2: the normalised probability mass of the true options.
    """
    if len(logprobs) != len(labels) or not labels:
        raise ValueError("one label per option, at least one option")
    if not any(labels):
        raise ValueError("no true option")
    best = max(range(len(logprobs)), key=lambda i: logprobs[i])
    top = max(logprobs)
    p = [math.exp(lp - top) for lp in logprobs]
    return float(labels[best] == 1), sum(pi for pi, y in zip(p, labels) if y) / sum(p)


def label_accuracy(prefs: pd.DataFrame, answers: pd.Series, kind: str = "number") -> pd.DataFrame:
    """Preference-label accuracy of peer judging where ground truth exists.

    A pair is *informative* when exactly one of chosen/rejected is right. Its label is correct
    when the chosen answer is the right one. Returns one row per pair with ``chosen_right``,
    ``rejected_right`` and ``label`` ('correct', 'wrong', 'both right', 'both wrong').
    """
    if len(prefs) == 0:
        return prefs.assign(chosen_right=[], rejected_right=[], label=[])
    ans = prefs["prompt_id"].map(answers)
    chosen, rejected = (
        [a is not None and not pd.isna(a) and exact_match(y, a, kind) for y, a in zip(prefs[side], ans)]
        for side in ("chosen", "rejected")
    )
    label = [
        "correct" if c and not r else "wrong" if r and not c else "both right" if c else "both wrong"
        for c, r in zip(chosen, rejected)
    ]
    return prefs.assign(chosen_right=chosen, rejected_right=rejected, label=label, has_answer=ans.notna())


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (nan, nan when n = 0)."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # the interval holds p; clamped so that rounding cannot put p outside it (p = 1, n = 60)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def summarize_label_accuracy(labelled: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Accuracy = correct / (correct + wrong) over informative pairs, with the counts and a
    95% Wilson interval."""
    cols = [*by, "correct", "wrong", "informative", "pairs", "accuracy", "accuracy_low", "accuracy_high"]
    if len(labelled) == 0:
        return pd.DataFrame(columns=cols)
    g = labelled.groupby(by, dropna=False) if by else [((), labelled)]
    rows = []
    for key, df in g:
        key = key if isinstance(key, tuple) else (key,)
        correct, wrong = int((df["label"] == "correct").sum()), int((df["label"] == "wrong").sum())
        n = correct + wrong
        accuracy = correct / n if n else float("nan")
        rows.append((*key, correct, wrong, n, len(df), accuracy, *wilson_interval(correct, n)))
    return pd.DataFrame(rows, columns=cols)
