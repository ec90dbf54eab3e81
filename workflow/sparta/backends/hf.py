"""Hugging Face backend: transformers + PEFT in this process, on CPU or GPU.

Members of one base share its weights (:class:`~sparta.models.MemberLoader`); a served
member activates its adapter on every call. Generation is batched with left padding and
seeded; continuation log-probabilities run each prompt once and its continuations against
the prompt's key/value cache.
"""

from __future__ import annotations

import inspect

import torch
from tqdm.auto import tqdm

from ..chat import stop_token_ids
from ..members import MemberSpec
from ..models import MemberLoader
from ..settings import BackendSettings, Runtime, Sampling
from . import Generation, decode_answer


class HFMember:
    """A Hugging Face model (with its adapter active) and its tokenizer."""

    def __init__(self, model, tok, activate=None):
        self._model, self.tok, self._activate = model, tok, activate

    @property
    def model(self):
        """The model with this member's adapter active: ``activate()`` (loaded on first use;
        members of one base share its weights), or the model given."""
        return self._activate() if self._activate is not None else self._model

    def generate(
        self, texts, sampling: Sampling, seed: int, batch_size: int = 8, desc: str = "generate"
    ) -> list[Generation]:
        return generate(self.model, self.tok, texts, sampling, seed, batch_size, desc)

    def continuation_logprobs(self, prompts, conts, batch_size: int = 8) -> list[list[float]]:
        return continuation_logprobs(self.model, self.tok.pad_token_id, prompts, conts, batch_size)


class HFBackend:
    """Serves members of any number of bases from one :class:`MemberLoader`."""

    def __init__(self, runtime: Runtime):
        self.loader = MemberLoader(runtime.device, runtime.dtype)

    def serve(self, spec: MemberSpec) -> HFMember:
        loader = self.loader
        return HFMember(None, loader.tokenizer(spec), activate=lambda: loader.load(spec))


def open_backend(backend: BackendSettings, runtime: Runtime, specs) -> HFBackend:
    return HFBackend(runtime)


@torch.no_grad()
def generate(
    model,
    tok,
    texts: list[str],
    sampling: Sampling,
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
    if sampling.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(
            do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k
        )
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


@torch.no_grad()
def continuation_logprobs(model, pad: int, prompts, conts, batch_size: int) -> list[list[float]]:
    """Summed log-probability of each continuation after its prompt (token ids).

    Prompts are sorted by length and batched with left padding; each prompt runs once and
    its continuations run against its cache. Rows of one batch have the same number of
    continuations."""
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: (len(conts[i]), -len(prompts[i])))
    out: list[list[float]] = [[] for _ in prompts]
    with tqdm(total=len(prompts), desc="score", unit="prompt") as bar:
        start = 0
        while start < len(order):
            width = len(conts[order[start]])
            idx = [i for i in order[start : start + batch_size] if len(conts[i]) == width]
            rows = _candidate_logprobs(model, [prompts[i] for i in idx], [conts[i] for i in idx], pad, device)
            for i, lp in zip(idx, rows):
                out[i] = lp
            start += len(idx)
            bar.update(len(idx))
    return out


def _candidate_logprobs(model, prompts, conts, pad, device) -> list[list[float]]:
    b, c = len(prompts), len(conts[0])
    width = max(len(p) for p in prompts)
    ids = torch.full((b, width), pad, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    first = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    last_logp = torch.log_softmax(first.logits[:, -1].float(), -1)  # (b, vocab)
    cache = first.past_key_values
    cache.batch_repeat_interleave(c)
    clen = max(len(x) for row in conts for x in row)
    cont = torch.full((b * c, clen), pad, dtype=torch.long)
    cmask = torch.zeros((b * c, clen), dtype=torch.long)
    for i, row in enumerate(conts):
        for j, x in enumerate(row):
            cont[i * c + j, : len(x)] = torch.tensor(x)
            cmask[i * c + j, : len(x)] = 1
    cont, cmask = cont.to(device), cmask.to(device)
    full_mask = torch.cat([mask.repeat_interleave(c, 0), cmask], dim=1)
    start = pos[:, -1:].repeat_interleave(c, 0) + 1
    cpos = start + torch.arange(clen, device=device)
    nxt = model(
        input_ids=cont,
        attention_mask=full_mask,
        position_ids=cpos,
        use_cache=True,
        **{_cache_kwarg(model): cache},
    )
    logp = torch.log_softmax(nxt.logits.float(), -1)  # (b*c, clen, vocab)
    result = []
    for i in range(b):
        row = []
        for j, x in enumerate(conts[i]):
            total = last_logp[i, x[0]].item()
            for k in range(1, len(x)):
                total += logp[i * c + j, k - 1, x[k]].item()
            row.append(total)
        result.append(row)
    return result


def _cache_kwarg(model) -> str:
    # transformers 5.2x renamed the forward argument `past_key_values` to `cache`
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
