"""Prompts through a model's chat template, and answers cut at its end of turn. Pure: these
need only the tokenizer, never the model."""

from __future__ import annotations

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


def chat_text(tok, user: str, system: str | None = None, assistant_prefix: str = "") -> str:
    """The prompt text of one user turn through the model's chat template, ready for the
    assistant to speak (optionally with the first words of its answer already given)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": user}
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text + assistant_prefix


def stop_token_ids(tok) -> list[int]:
    """The end-of-sequence and end-of-turn tokens of a tokenizer."""
    ids = {tok.eos_token_id}
    vocab = tok.get_vocab()
    for t in END_OF_TURN:
        if t in vocab:
            ids.add(tok.convert_tokens_to_ids(t))
    return sorted(i for i in ids if i is not None)
