"""Prompts through a model's chat template, and answers cut at its end of turn. Pure: these
need only the tokenizer, never the model."""

from __future__ import annotations

import re

from .members import check_model_folder

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


def chat_text(tok, user: str, system: str | None = None, assistant_prefix: str = "") -> str:
    """The prompt text of one user turn through the model's chat template, ready for the
    assistant to speak (optionally with the first words of its answer already given)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + assistant_prefix


def stop_token_ids(tok) -> list[int]:
    """The end-of-sequence and end-of-turn tokens of a tokenizer."""
    ids = {tok.eos_token_id}
    vocab = tok.get_vocab()
    for t in END_OF_TURN:
        if t in vocab:
            ids.add(tok.convert_tokens_to_ids(t))
    return sorted(i for i in ids if i is not None)


_SLOT = "\x00sparta slot {}\x00"  # stands in for a message's content while the template renders


def chat_ids(
    tok, user: str, system: str | None = None, assistant_prefix: str = "", plain: bool = True
) -> list[int]:
    """Token ids of :func:`chat_text`. With ``plain`` (the default) the messages' contents are
    tokenized as plain text: a special-token string inside them (say a literal ``<|im_end|>``
    in an answer under judgment) stays characters and never becomes a control token; only the
    template's own markup gives special tokens."""
    if not plain:
        return tok(chat_text(tok, user, system, assistant_prefix), add_special_tokens=False)["input_ids"]
    contents = {_SLOT.format(0): system, _SLOT.format(1): user}
    text = chat_text(tok, _SLOT.format(1), system and _SLOT.format(0), assistant_prefix)
    ids: list[int] = []
    for part in re.split("(" + "|".join(map(re.escape, contents)) + ")", text):
        if part in contents:
            ids += tok(contents[part], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        elif part:
            ids += tok(part, add_special_tokens=False)["input_ids"]
    return ids


def load_tokenizer(base):
    """The tokenizer of a base model folder, padded on the left, with its chat template (a
    tokenizer without one is refused: every model is prompted through it). Needs transformers
    alone, not torch: the local rules (split_prompts) count prompt tokens with it in an env
    without torch (envs/local.yaml)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(check_model_folder(base, "base model"))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation and scoring pad on the left
    if tok.chat_template is None:
        raise ValueError(
            f"the tokenizer of {base} has no chat template; sparta prompts every model through it"
        )
    return tok
