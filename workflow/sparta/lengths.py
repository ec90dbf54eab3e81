"""Prompts longer than a model's context: a prompt, through the chat template
with the run's system prompt, plus ``generation.max_new_tokens`` must fit the context each
base model's config.json states. ``prompts.too_long`` says what happens to those that do not:
``skip`` (the default) leaves them out of the splits with a count, ``stop`` stops with the
prompts named.

Two places look: the config check, before any job, with a bound that needs no tokenizer (a
prompt of fewer UTF-8 bytes than the room left cannot be longer in tokens than that: no
tokenizer is loaded for ordinary prompt sets), then the tokenizer for the rest when the base
is on disk; and rule split_prompts, always, with the tokenizer (the base is built before it),
so what is skipped never depends on whether a base was converted when snakemake started.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pandas as pd


class PromptTooLong(ValueError):
    """Prompts longer than the context, with ``prompts.too_long: stop``."""


@dataclass(frozen=True)
class Budget:
    """What a prompt may hold: ``context`` tokens of the smallest base, less the answer's
    ``max_new_tokens``; ``folder`` is that base's folder (its tokenizer counts)."""

    folder: str
    context: int
    max_new_tokens: int

    @property
    def room(self) -> int:
        return self.context - self.max_new_tokens


ALLOWANCE = 512
"""Bytes of room a chat template may take, for the check without a tokenizer: prompts within
it of the room are counted with the tokenizer (which measures the template exactly)."""


def candidates(prompts: pd.Series, room: int, allowance: int = ALLOWANCE) -> pd.Series:
    """The prompts that may not fit ``room`` tokens: a token is at least one UTF-8 byte of the
    text (byte-level BPE, SentencePiece with byte fallback), so a prompt of at most ``room``
    bytes less what the template adds fits without counting."""
    return prompts.map(lambda p: len(p.encode("utf-8")) + allowance > room)


@functools.cache
def _tokenizer(folder: str):
    from .chat import load_tokenizer

    return load_tokenizer(folder)


def too_long(prompts: pd.DataFrame, budget: Budget, system_prompt: str | None) -> pd.Series:
    """Per row of a prompts table: whether its prompt, through the chat template, leaves less
    than the answer's room. The tokenizer is loaded only when some prompt may not fit."""
    found = pd.Series(False, index=prompts.index)
    system = len((system_prompt or "").encode("utf-8"))
    if not candidates(prompts["prompt"], budget.room, ALLOWANCE + system).any():
        return found
    from .chat import chat_text

    tok = _tokenizer(budget.folder)

    def count(texts):
        return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]

    template = count([chat_text(tok, "", system_prompt)])[0]  # the template's own tokens
    maybe = candidates(prompts["prompt"], budget.room, template + 8)  # + merges at the seams
    if maybe.any():
        texts = [chat_text(tok, p, system_prompt) for p in prompts.loc[maybe, "prompt"]]
        found.loc[maybe] = [n > budget.room for n in count(texts)]
    return found


def describe(prompts: pd.DataFrame, mask: pd.Series, budget: Budget, where: str) -> str:
    """One line naming how many prompts are too long, and some of them."""
    ids = prompts.loc[mask, "prompt_id"].astype(str).tolist()
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return (
        f"{where}: {len(ids)} of {len(prompts)} prompts are longer than the {budget.room} tokens "
        f"the context of {budget.folder} ({budget.context}) leaves after generation.max_new_tokens "
        f"({budget.max_new_tokens}), through the chat template: {shown}"
    )


def apply(prompts: pd.DataFrame, budget: Budget | None, system_prompt: str | None, policy: str, where: str):
    """``prompts`` without the rows too long for ``budget`` (policy skip), or PromptTooLong
    (policy stop); and the message (None when every prompt fits)."""
    if budget is None:
        return prompts, None
    mask = too_long(prompts, budget, system_prompt)
    if not mask.any():
        return prompts, None
    message = describe(prompts, mask, budget, where)
    if policy == "stop":
        raise PromptTooLong(
            f"{message}. Shorten or remove them, raise the context, lower generation.max_new_tokens, "
            "or set prompts.too_long: skip to leave them out"
        )
    return prompts.loc[~mask].reset_index(drop=True), f"{message}; left out (prompts.too_long: skip)"
