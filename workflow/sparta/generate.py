"""Batched, seeded generation through a model's chat template (Hugging Face backend).

The vLLM backend (engines.py) has the same ``generate`` signature; both return one
:class:`Generation` per prompt, in input order.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings; defaults are the authors' (T 0.7, top_p 0.95, top_k 50)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 50
    max_new_tokens: int = 512
    do_sample: bool = True


@dataclass(frozen=True)
class Generation:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" (end of turn) or "length" (max_new_tokens reached)


def derive_seed(*parts) -> int:
    """A 31-bit seed from any parts (seed, iteration, round, member...), stable across runs."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF


def stop_token_ids(tok) -> list[int]:
    ids = {tok.eos_token_id}
    for t in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        i = tok.convert_tokens_to_ids(t) if t in tok.get_vocab() else None
        if i is not None:
            ids.add(i)
    return sorted(i for i in ids if i is not None)


def decode_answer(tok, ids: list[int], stops, finished: bool = False) -> Generation:
    """The answer in generated ``ids``: cut at the first stop token (end of turn), decoded.
    ``finished`` marks an answer the engine ended by itself without a stop token in ``ids``."""
    for pos, t in enumerate(ids):
        if t in stops:
            return Generation(tok.decode(ids[:pos], skip_special_tokens=True).strip(), pos, "stop")
    text = tok.decode(ids, skip_special_tokens=True).strip()
    return Generation(text, len(ids), "stop" if finished else "length")


@torch.no_grad()
def generate(
    model,
    tok,
    texts: list[str],
    sampling: SamplingParams,
    seed: int,
    batch_size: int = 8,
    desc: str = "generate",
) -> list[Generation]:
    """Generate one answer per prompt text (already through the chat template).

    Prompts are sorted by length and generated in batches with left padding; the result is
    returned in input order. One seed for the whole call makes the output reproducible.
    """
    if not texts:
        return []
    torch.manual_seed(seed)
    device = next(model.parameters()).device
    stops = stop_token_ids(tok)
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    out: list[Generation | None] = [None] * len(texts)
    kwargs = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=stops)
    if sampling.do_sample and sampling.temperature > 0:
        kwargs.update(
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k
        )
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    with tqdm(total=len(texts), desc=desc, unit="prompt") as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items()}
            seqs = model.generate(**enc, **kwargs)
            new = seqs[:, enc["input_ids"].shape[1] :].tolist()
            for i, ids in zip(idx, new):
                out[i] = decode_answer(tok, ids, stops)
            bar.update(len(idx))
    return out  # type: ignore[return-value]
