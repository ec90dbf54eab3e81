"""Reading a judge's verdict from its generated text (mode generate): the score cascade (a JSON
object first, then patterns) that :class:`~sparta.judging.prompts.Rubric` reads Sparta's judge
with, and the winner cascade of a pairwise judge. Text only: no prompt, no model."""

from __future__ import annotations

import json
import math
import re

_PATTERNS = [
    ("json key", re.compile(r'"score"\s*:\s*"?(-?\d+(?:\.\d+)?)')),
    ("score label", re.compile(r"\bscore\s*(?:is|[:=])?\s*(-?\d+(?:\.\d+)?)", re.I)),
    ("fraction", re.compile(r"(-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*10\b", re.I)),
]
_WINNER = [
    re.compile(r'"better"\s*:\s*"?\s*\[?([AB])\b', re.I),
    re.compile(r"\[\[([AB])\]\]"),
    re.compile(r"\b(?:response|answer|assistant)\s+([AB])\s+is\s+(?:better|superior|preferred)", re.I),
    re.compile(r"\bbetter\b[^A-Za-z]{0,10}(?:response\s+|answer\s+)?([AB])\b", re.I),
    re.compile(r"^\s*\W{0,3}([AB])\W{0,3}\s*$"),
]


def parse_score(text: str) -> tuple[float | None, str | None]:
    """Score from a judge's text: a JSON object first, then a cascade of patterns.

    Returns (score, None) or (None, what went wrong). Scores outside [1, 10] are unusable;
    there is no fallback score.
    """
    found: float | None = None
    for m in re.finditer(r"\{[^{}]*\}", text):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("score"), (int, float)):
            found = float(obj["score"])
            break
    if found is None:
        for _, pattern in _PATTERNS:
            m = pattern.search(text)
            if m:
                found = float(m.group(1))
                break
    if found is None:
        return None, "no score found in judge output"
    if not 1 <= found <= 10 or math.isnan(found):
        return None, f"score {found:g} is outside 1-10"
    return found, None


def parse_winner(text: str) -> tuple[str | None, str | None]:
    """ "A" or "B" from a pairwise judge's text (JSON first, then a cascade of patterns), or
    (None, what went wrong)."""
    for pattern in _WINNER:
        m = pattern.search(text)
        if m:
            return m.group(1).upper(), None
    return None, "no verdict (A or B) found in judge output"
