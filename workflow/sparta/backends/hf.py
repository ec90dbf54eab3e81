"""Hugging Face backend: transformers + PEFT in this process, on CPU or GPU.

Every member of one base shares its weights: their LoRA adapters are loaded side by side into
one PEFT model (:class:`~sparta.models.MemberLoader`), and requests of different members run
in the same batches (PEFT's mixed-adapter batches, ``adapter_names``). Sampling draws each
answer's tokens from its own seeded generator, so an answer does not depend on which other
requests share its batch: a member's answers are the same whether its job serves one member
or the whole pool.
"""

from __future__ import annotations

import logging
import time

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from ..chat import stop_token_ids
from ..members import MemberSpec
from ..models import MemberLoader
from ..settings import BackendSettings, Runtime, Sampling
from . import Backend, Generation, decode_answer

log = logging.getLogger(__name__)


class HFBackend(Backend):
    """Serves members of any number of bases from one :class:`MemberLoader`."""

    def __init__(self, runtime: Runtime, specs=()):
        self.loader = MemberLoader(runtime.device, runtime.dtype)
        self.specs = list(specs)

    def tokenizer(self, spec: MemberSpec):
        return self.loader.tokenizer(spec)

    def _model(self, members: list[MemberSpec]):
        """The model holding every adapter of ``members`` (one base), and each row's adapter
        name (None for a plain model without adapters)."""
        bases = {m.base for m in members}
        if len(bases) != 1:
            raise ValueError(f"one call serves members of one base, got {sorted(bases)}")
        model = self.loader.load_all(list({m.name: m for m in members}.values()))
        if not hasattr(model, "peft_config"):
            return model, None
        return model, [self.loader.adapter_name(m) for m in members]

    def generate(self, members, prompts, sampling: Sampling, seeds, batch_size=8, desc="generate"):
        if not prompts:
            return []
        model, names = self._model(members)
        return generate(model, self.tokenizer(members[0]), prompts, sampling, seeds, batch_size, desc, names)

    def continuation_logprobs(self, members, prompts, conts, batch_size=8):
        if not prompts:
            return []
        model, names = self._model(members)
        pad = self.tokenizer(members[0]).pad_token_id
        return continuation_logprobs(model, pad, prompts, conts, batch_size, names)


def open_backend(backend: BackendSettings, runtime: Runtime, specs) -> HFBackend:
    return HFBackend(runtime, specs)


class SeededSampler(LogitsProcessor):
    """Temperature, top-k and top-p, then one draw per row from that row's own generator.
    Returns scores that are -inf but for the drawn token, so greedy decoding takes it: a row's
    tokens depend only on its seed and its own logits, never on the rest of its batch."""

    def __init__(self, seeds, sampling: Sampling, device):
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]
        self.sampling = sampling

    def __call__(self, input_ids, scores):
        s = self.sampling
        logits = scores.float() / s.temperature
        k = s.top_k if s.top_k and s.top_k < logits.shape[-1] else logits.shape[-1]
        top, index = torch.topk(logits, k, dim=-1)  # sorted: the top-k tokens, best first
        if s.top_p < 1.0:
            probs = top.softmax(-1)
            drop = probs.cumsum(-1) - probs >= s.top_p  # keep the smallest set reaching top_p
            top = top.masked_fill(drop, float("-inf"))
        probs = top.softmax(-1)
        picks = [torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)]
        drawn = index.gather(1, torch.stack(picks))
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn, 0.0)


@torch.no_grad()
def generate(
    model,
    tok,
    prompts: list[list[int]],
    sampling: Sampling,
    seeds: list[int],
    batch_size: int = 8,
    desc: str = "generate",
    adapter_names: list[str] | None = None,
) -> list[Generation]:
    """One answer per prompt (token ids, already through the chat template), in input order.

    Prompts are sorted by length and generated in batches with left padding; each row uses
    its own adapter (``adapter_names``) and its own seed (``seeds``)."""
    if not prompts:
        return []
    device = next(model.parameters()).device
    stops = stop_token_ids(tok)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    out: list[Generation | None] = [None] * len(prompts)
    # an explicit config: nothing from the checkpoint's generation_config (penalties,
    # sampling flags) is applied behind our back
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=sampling.max_new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=stops,
        temperature=1.0,
        top_p=1.0,
        top_k=50,
        repetition_penalty=1.0,
    )
    started, logged = time.perf_counter(), 0
    with tqdm(total=len(prompts), desc=desc, unit="prompt") as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            enc = {
                k: v.to(device) for k, v in _left_padded([prompts[i] for i in idx], tok.pad_token_id).items()
            }
            extra = {}
            if adapter_names is not None:
                extra["adapter_names"] = [adapter_names[i] for i in idx]
            if not sampling.greedy:
                sampler = SeededSampler([seeds[i] for i in idx], sampling, device)
                extra["logits_processor"] = LogitsProcessorList([sampler])
            seqs = model.generate(**enc, generation_config=config, **extra)
            new = seqs[:, enc["input_ids"].shape[1] :].tolist()
            for i, ids in zip(idx, new):
                out[i] = decode_answer(tok, ids, stops)
            bar.update(len(idx))
            done = start + len(idx)
            if done == len(order) or done - logged >= max(batch_size, len(order) // 10):
                logged, elapsed = done, time.perf_counter() - started
                rate = done / elapsed
                log.info("%s: %d/%d prompts, %.2f prompts/s, %.0f s", desc, done, len(order), rate, elapsed)
    return out  # type: ignore[return-value]


def _left_padded(rows: list[list[int]], pad: int) -> dict[str, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return {"input_ids": ids, "attention_mask": mask}


@torch.no_grad()
def continuation_logprobs(
    model, pad: int, prompts, conts, batch_size: int, adapter_names: list[str] | None = None
) -> list[list[float]]:
    """Summed log-probability of each continuation after its prompt (token ids), each row
    under its own adapter. Prompts are sorted by length and batched with left padding."""
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    out: list[list[float]] = [[] for _ in prompts]
    with tqdm(total=len(prompts), desc="score", unit="prompt") as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            names = [adapter_names[i] for i in idx] if adapter_names is not None else None
            rows = _tree_logprobs(
                model, [prompts[i] for i in idx], [conts[i] for i in idx], pad, device, names
            )
            for i, lp in zip(idx, rows):
                out[i] = lp
            bar.update(len(idx))
    return out


def _tree_logprobs(model, prompts, conts, pad, device, names=None) -> list[list[float]]:
    """One forward pass for a batch of prompts and all their continuations at once.

    Each row is its left-padded prompt followed by every continuation's tokens but the last,
    laid side by side; a 4D attention mask lets a continuation token see the prompt and its
    own earlier tokens only (a tree: the continuations never see each other), and position
    ids continue the prompt's. So the prompt is computed once, no key/value cache is copied
    per continuation, and only the logits of the last prompt position and of the
    continuation tokens are kept."""
    b = len(prompts)
    width = max(len(p) for p in prompts)
    # per row: (continuation j, its token k) of every appended token, continuations consecutive
    tails = [[(j, k) for j, x in enumerate(row) for k in range(len(x) - 1)] for row in conts]
    extra = max(len(t) for t in tails)
    total = width + extra
    ids = torch.full((b, total), pad, dtype=torch.long)
    pos = torch.zeros((b, total), dtype=torch.long)
    attend = torch.eye(total, dtype=torch.bool).repeat(b, 1, 1)  # padding sees itself: no empty row
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    for i, (p, row) in enumerate(zip(prompts, conts)):
        off = width - len(p)
        ids[i, off:width] = torch.tensor(p)
        pos[i, off:width] = torch.arange(len(p))
        attend[i, off:width, off:width] = causal[: len(p), : len(p)]
        for q, (j, k) in enumerate(tails[i]):
            col = width + q
            ids[i, col] = row[j][k]
            pos[i, col] = len(p) + k
            attend[i, col, off:width] = True
            attend[i, col, col - k : col + 1] = True  # its own continuation's tokens 0..k
    kwargs = {"adapter_names": names} if names is not None else {}
    logits = model(
        input_ids=ids.to(device),
        attention_mask=attend[:, None].to(device),
        position_ids=pos.to(device),
        use_cache=False,
        logits_to_keep=extra + 1,
        **kwargs,
    ).logits
    logp = torch.log_softmax(logits.float(), -1).cpu()  # (b, extra + 1, vocab); 0 = last prompt token
    result = []
    for i, row in enumerate(conts):
        where = {jk: 1 + q for q, jk in enumerate(tails[i])}
        scores = []
        for j, x in enumerate(row):
            total_lp = logp[i, 0, x[0]].item()
            for k in range(1, len(x)):
                total_lp += logp[i, where[(j, k - 1)], x[k]].item()
            scores.append(total_lp)
        result.append(scores)
    return result
