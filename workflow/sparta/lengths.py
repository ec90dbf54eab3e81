"""Prompts longer than a model's context: a prompt, through the chat template
with the run's system prompt, plus ``generation.max_new_tokens`` must fit the context each
base model's config.json states. ``prompts.too_long`` says what happens to those that do not:
``skip`` (the default) leaves them out of the splits with a count, ``stop`` stops with the
prompts named.

Two places look: the config check, before any job (:func:`candidates` spares the tokenizer
for ordinary prompt sets), and rule split_prompts, always, with the tokenizer (the base is
built before it), so what is skipped never depends on whether a base was converted when
snakemake started.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import hub
from .chat import chat_text, load_tokenizer
from .modelfiles import ModelFileError, gguf_context_length, gguf_path, read_json


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
    return load_tokenizer(folder)


def too_long(prompts: pd.DataFrame, budget: Budget, system_prompt: str | None) -> pd.Series:
    """Per row of a prompts table: whether its prompt, through the chat template, leaves less
    than the answer's room. The tokenizer is loaded only when some prompt may not fit."""
    found = pd.Series(False, index=prompts.index)
    system = len((system_prompt or "").encode("utf-8"))
    if not candidates(prompts["prompt"], budget.room, ALLOWANCE + system).any():
        return found
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


# --- the bases' contexts, read before any job --------------------------------------------------

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(folder: Path) -> int | None:
    """The context length a model folder's config.json states (None where it states none)."""
    data = read_json(folder / "config.json") or {}
    for section in (data, data.get("text_config") or {}):
        for key in CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _local(root: Path, folder: str) -> Path:
    """A model folder of the config on this machine: a hub id's cached snapshot (or a path
    that does not exist when it is not downloaded yet: the check waits for the download)."""
    if hub.is_ref(folder):
        try:
            return hub.cached(hub.parse(folder)) or root / "_not_downloaded_"
        except hub.HubError:
            return root / "_not_downloaded_"
    return root / folder


def prompt_bases(settings) -> list[str]:
    """The base model folders (or hub ids) of a run's members: their contexts bound a prompt."""
    return sorted({settings.base_folder(m.base) for m in settings.members})


def prompt_budget(bases: list[str], max_new_tokens: int, root: str | Path = ".") -> Budget | None:
    """The room a prompt has: the smallest context of ``bases`` less the answer's tokens (None
    when no base states its context on disk yet)."""
    found = [(context_length(local), str(local)) for local in (_local(Path(root), f) for f in bases)]
    found = [(context, folder) for context, folder in found if context is not None]
    if not found:
        return None
    context, folder = min(found)
    return Budget(folder, context, max_new_tokens)


def base_contexts(settings, root: str | Path = ".") -> list[tuple[int, str, str]]:
    """(context length, folder, where it was read) of each base model the run's members use,
    from what is on disk before any job: the folder's config.json (a hub id: its snapshot in
    the Hugging Face cache), else, for a GGUF base not converted yet, the GGUF's metadata."""
    found = []
    for name in sorted({m.base for m in settings.members}):
        folder = settings.base_folder(name)
        context, source = context_length(_local(Path(root), folder)), "config.json"
        spec = settings.base_models.get(name)
        if context is None and spec is not None and spec.gguf_package and spec.gguf_file:
            try:
                path = gguf_path(spec.gguf_package, spec.gguf_file)
            except ModelFileError:
                continue  # the pool check names it
            context, source = gguf_context_length(path), f"GGUF metadata of {path.name}"
        if context is not None:
            found.append((context, folder, source))
    return found


def context_problems(settings, root: Path, notes: list[str]) -> list[str]:
    """Token budgets that do not fit the context of a base model the run uses (read before
    any job, see :func:`base_contexts`): generation must leave room for a prompt."""
    found = base_contexts(settings, root)
    if not found:
        return []
    context, folder, source = min(found)
    where = f"the context of base model {folder} ({context} tokens, {source})"
    budgets = [
        ("generation.max_new_tokens", settings.generation.max_new_tokens, "<"),
        ("dpo.max_length", settings.dpo.max_length, "<="),
        ("judge.max_length", settings.judge.max_length, "<="),
    ]
    if settings.judge.mode == "generate":
        budgets.append(("judge.max_new_tokens", settings.judge.max_new_tokens, "<"))
    if any(m.sft_domain for m in settings.members):
        budgets.append(("sft.max_length", settings.sft.max_length, "<="))
    if settings.evaluation.enabled:
        for task in settings.evaluation.tasks:
            budgets.append((f"evaluation.tasks ({task.name}).max_new_tokens", task.max_new_tokens, "<"))
    if settings.backend == "vllm" and settings.vllm.max_model_len is not None:
        budgets.append(("vllm.max_model_len", settings.vllm.max_model_len, "<="))
    problems = []
    for key, value, fits in budgets:
        if fits == "<" and value >= context:
            problems.append(
                f"{key} ({value}) leaves no room for a prompt in {where}: lower it below {context}"
            )
        elif fits == "<=" and value > context:
            problems.append(f"{key} ({value}) is longer than {where}: lower it to {context} or less")
    return problems
