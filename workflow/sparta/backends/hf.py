"""Hugging Face backend: transformers + PEFT in this process, on CPU or GPU.

The members of one base share its weights: their LoRA adapters sit side by side in one PEFT
model (:class:`~sparta.models.MemberLoader`) and their requests run in the same batches
(PEFT's mixed-adapter batches). Each answer is sampled from its own seeded generator, so it
does not depend on which other requests share its batch.
"""

from __future__ import annotations

import logging
import os
import time

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..chat import stop_token_ids
from ..libpatches import install
from ..members import MemberSpec
from ..models import MemberLoader
from ..settings import BackendSettings, Runtime, Sampling
from . import Backend, Generation, decode_answer

log = logging.getLogger(__name__)

# the KV cache's argument name: ``cache`` since transformers 5.21, ``past_key_values`` before
# (envs/vllm.yaml); a wrong one is swallowed by the forward's **kwargs (libpatches: kv_cache_name)
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


class HFBackend(Backend):
    """Serves members of any number of bases from one :class:`MemberLoader`."""

    def __init__(self, runtime: Runtime, specs=()):
        self.loader = MemberLoader(runtime.device, runtime.dtype)
        self.specs = list(specs)

    def tokenizer(self, spec: MemberSpec):
        return self.loader.tokenizer(spec)

    def _model(self, members: list[MemberSpec]):
        """The model holding every adapter of ``members`` (one base), each row's adapter name."""
        bases = {m.base for m in members}
        if len(bases) != 1:
            raise ValueError(f"one call serves members of one base, got {sorted(bases)}")
        model = self.loader.load_all(list({m.name: m for m in members}.values()))
        if not hasattr(model, "peft_config"):
            return model, None
        return model, [self.loader.adapter_name(m) for m in members]

    def generate(self, members, prompts, sampling: Sampling, seeds, *, batch_size=8, desc="generate"):
        if not prompts:
            return []
        model, names = self._model(members)
        tok = self.tokenizer(members[0])
        return generate(
            model, tok, prompts, sampling, seeds, batch_size=batch_size, desc=desc, adapter_names=names
        )

    def continuation_logprobs(self, members, prompts, conts, batch_size=8):
        if not prompts:
            return []
        model, names = self._model(members)
        pad = self.tokenizer(members[0]).pad_token_id
        return continuation_logprobs(model, pad, prompts, conts, batch_size=batch_size, adapter_names=names)


def open_backend(backend: BackendSettings, runtime: Runtime, specs) -> HFBackend:
    return HFBackend(runtime, specs)


class SeededSampler(LogitsProcessor):
    """Temperature, top-k and top-p, then one draw per row from that row's own generator.
    Returns scores that are -inf but for the drawn token, so greedy decoding takes it. The draw
    is ``torch.multinomial``'s (the argmax of p / q, q ~ Exp(1) from the row's CPU generator:
    exactly its numbers, tested), made for the whole batch at once (a few kernels a step)."""

    def __init__(self, seeds, sampling: Sampling):
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.sampling = sampling
        self.ahead: torch.Tensor | None = None  # (rows, steps, k) drawn ahead, on the scores' device
        self.step = 0  # the next step of ``ahead``

    def __call__(self, input_ids, scores):
        return torch.full_like(scores, float("-inf")).scatter_(1, self.draw(scores)[:, None], 0.0)

    def select(self, rows: list[int]) -> None:
        """Keep the generators of ``rows`` only (the batch's other rows have finished)."""
        self.generators = [self.generators[r] for r in rows]
        if self.ahead is not None:
            self.ahead = self.ahead[torch.tensor(rows, device=self.ahead.device)]

    def draw(self, scores) -> torch.Tensor:
        """One token per row of ``scores`` (rows, vocabulary)."""
        s = self.sampling
        logits = scores.float() / s.temperature
        k = s.top_k if s.top_k and s.top_k < logits.shape[-1] else logits.shape[-1]
        top, index = torch.topk(logits, k, dim=-1)  # sorted: the top-k tokens, best first
        if s.top_p < 1.0:
            probs = top.softmax(-1)
            drop = probs.cumsum(-1) - probs >= s.top_p  # keep the smallest set reaching top_p
            top = top.masked_fill(drop, float("-inf"))
        probs = top.softmax(-1)
        picks = (probs / self.exponentials(probs.shape[-1], probs.device)).argmax(-1, keepdim=True)
        return index.gather(1, picks)[:, 0]

    def exponentials(self, k: int, device) -> torch.Tensor:
        """This step's q (rows, k), float32 Exp(1): each row's next k numbers of its generator,
        drawn for up to ``max_new_tokens`` steps at once (at most :data:`DRAW_AHEAD` numbers;
        ``exponential_`` fills in order, so the same numbers: tested) and copied once."""
        if self.ahead is None or self.step == self.ahead.shape[1] or self.ahead.shape[2] != k:
            rows = len(self.generators)
            steps = max(1, min(self.sampling.max_new_tokens, DRAW_AHEAD // max(rows * k, 1)))
            block = torch.empty((rows, steps * k), dtype=torch.float32)
            for row, g in zip(block, self.generators):
                row.exponential_(1, generator=g)
            self.ahead, self.step = block.view(rows, steps, k).to(device, non_blocking=True), 0
        self.step += 1
        return self.ahead[:, self.step - 1]


DRAW_AHEAD = 1 << 22
"""Random numbers :class:`SeededSampler` draws ahead at most (16 MB as float32)."""


@torch.no_grad()
def generate(
    model,
    tok,
    prompts: list[list[int]],
    sampling: Sampling,
    seeds: list[int],
    *,
    batch_size: int = 8,
    desc: str = "generate",
    adapter_names: list[str] | None = None,
) -> list[Generation]:
    """One answer per prompt (token ids, through the chat template), in input order, each row
    with its own adapter and seed, in batches prefilled by :func:`_prefilled` and decoded by
    :func:`_decode`: an answer is what generating it alone gives, up to float rounding."""
    if not prompts:
        return []
    install()
    device = next(model.parameters()).device
    stops, pad, max_new = stop_token_ids(tok), tok.pad_token_id, sampling.max_new_tokens
    names = adapter_names or [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), prompts[i], names[i], i))
    out: list[Generation | None] = [None] * len(prompts)
    started, logged = time.perf_counter(), 0
    with tqdm(total=len(prompts), desc=desc, unit="prompt") as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            rows = [prompts[i] for i in idx]
            who = [adapter_names[i] for i in idx] if adapter_names is not None else None
            enc, extra = _prefilled(model, rows, who, pad, device, max_new)
            sampler = None if sampling.greedy else SeededSampler([seeds[i] for i in idx], sampling)
            if OWN_DECODING:
                new = _decode(model, enc, extra[CACHE], who, sampler, max_new=max_new, stops=stops, pad=pad)
            else:  # transformers' generate (tests and benchmarks compare)
                extra.update(_adapter_hooks(who, device))
                if sampler is not None:
                    extra["logits_processor"] = LogitsProcessorList([sampler])
                seqs = model.generate(
                    **enc, generation_config=_generation_config(max_new, pad, stops), **extra
                )
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


def _generation_config(max_new_tokens: int, pad: int, stops) -> GenerationConfig:
    """``model.generate``'s config, explicit: nothing of the checkpoint's generation_config."""
    return GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad,
        eos_token_id=stops,
        temperature=1.0,
        top_p=1.0,
        top_k=50,
        repetition_penalty=1.0,
    )


ROW_INDEX = True
"""False: PEFT's own mixed-adapter path (libpatches: row_index; tests and benchmarks compare)."""


class AdapterRows(list):
    """``adapter_names`` of a mixed-adapter batch: each row's adapter, as PEFT reads it, and
    ``rows``: adapter -> its rows as an index tensor on the device (None: the whole batch),
    built once per batch for :func:`sparta.libpatches.rows_forward`."""

    def __init__(self, names, device):
        super().__init__(names)
        groups: dict[str, list[int]] = {}
        for row, name in enumerate(self):
            groups.setdefault(name, []).append(row)
        whole = len(groups) == 1
        self.rows = {a: None if whole else torch.tensor(r, device=device) for a, r in groups.items()}


def _adapter_hooks(names, device) -> dict:
    """The forward's ``adapter_names`` argument for rows of ``names`` (None: no adapters)."""
    if names is None:
        return {}
    return {"adapter_names": AdapterRows(names, device) if ROW_INDEX else list(names)}


OWN_DECODING = True
"""False: ``model.generate`` decodes, every row to the batch's end (tests and benchmarks compare)."""
COMPACT_AT = 0.25
"""Finished rows leave the batch once they are this share of it (each leaving copies the cache)."""


def _decode(model, enc, cache, names, sampler, *, max_new: int, stops, pad: int) -> list[list[int]]:
    """Each row's new tokens (up to and with its stop token), decoded greedily or by
    ``sampler`` from the inputs and cache of :func:`_prefilled`, as ``model.generate`` does
    (the same forward calls), but once finished rows are :data:`COMPACT_AT` of the batch the
    others go on alone: a row's tokens depend on its own seed only, so none change."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    n, device = ids.shape[0], ids.device
    cached = cache.get_seq_length()
    step_ids = ids[:, cached:]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, cached:]
    rows = list(range(n))  # the batch row of each present row
    hooks = _adapter_hooks(names, device)  # each adapter's rows, again only when rows leave
    out: list[list[int]] = [[] for _ in range(n)]
    finished = [False] * n
    stop_set = set(stops)
    for _ in range(max_new):
        result = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=positions,
            **{CACHE: cache},
            use_cache=True,
            logits_to_keep=1,
            **hooks,
        )
        cache = getattr(result, CACHE)
        logits = result.logits[:, -1, :].float()
        tokens = (logits.argmax(-1) if sampler is None else sampler.draw(logits)).tolist()
        for k, (row, token) in enumerate(zip(rows, tokens)):
            if not finished[row]:
                out[row].append(token)
                finished[row] = token in stop_set
            else:
                tokens[k] = pad
        alive = [k for k, row in enumerate(rows) if not finished[row]]
        if not alive:
            break
        if len(rows) - len(alive) >= max(1, COMPACT_AT * len(rows)):
            keep = torch.tensor(alive, device=device)
            cache.batch_select_indices(keep)
            mask, positions = mask[keep], positions[keep]
            tokens = [tokens[k] for k in alive]
            rows = [rows[k] for k in alive]
            if names is not None:
                names = [names[k] for k in alive]
                hooks = _adapter_hooks(names, device)
            if sampler is not None:
                sampler.select(alive)
        step_ids = torch.tensor(tokens, device=device)[:, None]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        positions = positions[:, -1:] + 1
    return out


GENERATE_SHARED_MIN = 4
"""Tokens a batch's prompts must share at the start for generation to compute them once."""
SHARE_PROMPTS = True
"""False: every row's prompt is computed in full with left padding (benchmarks compare)."""


class RoomyLayer(DynamicLayer):
    """A :class:`DynamicLayer` that keeps room after its tokens and writes each step's keys
    and values into it, where DynamicLayer concatenates (copying every layer's whole cache at
    every step: 83% of a pool judge's decoding time on 2 CPU cores). The cache is copied again
    only when it outgrows its room, rows are selected, or something else replaces it.
    ``keys``/``values`` are views of the filled part: readers see a DynamicLayer."""

    def __init__(self, room: int = 64, **kwargs):
        super().__init__(**kwargs)
        self.room = max(int(room), 1)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, add = self.get_seq_length(), key_states.shape[-2]
        held = self._buffers
        if (
            held is None
            or n == 0
            or self.keys.data_ptr() != held[0].data_ptr()  # replaced since (selected, reordered)
            or held[0].shape[0] != key_states.shape[0]
            or n + add > held[0].shape[-2]
        ):
            size = n + add + self.room
            keys = key_states.new_empty((*key_states.shape[:2], size, key_states.shape[-1]))
            values = value_states.new_empty((*value_states.shape[:2], size, value_states.shape[-1]))
            if n:
                keys[:, :, :n].copy_(self.keys)
                values[:, :, :n].copy_(self.values)
            held = self._buffers = (keys, values)
        held[0][:, :, n : n + add].copy_(key_states)
        held[1][:, :, n : n + add].copy_(value_states)
        self.keys, self.values = held[0][:, :, : n + add], held[1][:, :, : n + add]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``, room and all: one copy, and the next step writes into it."""
        held, n = self._buffers, self.get_seq_length()
        if held is None or n == 0 or self.keys.data_ptr() != held[0].data_ptr():
            return super().batch_select_indices(indices)
        held = self._buffers = (held[0][indices], held[1][indices])
        self.keys, self.values = held[0][:, :, :n], held[1][:, :, :n]

    def reset(self) -> None:
        self._buffers = None
        super().reset()


ROOMY_CACHE = True
"""False: transformers' DynamicCache, concatenating at every step (benchmarks compare)."""


def roomy_cache(room: int) -> DynamicCache:
    """An empty KV cache of :class:`RoomyLayer`s keeping ``room`` tokens of room."""
    cache = DynamicCache()
    if not ROOMY_CACHE:
        return cache
    cache.layer_class_to_replicate = lambda: RoomyLayer(room)
    return cache


def _prefilled(model, rows: list[list[int]], names: list[str] | None, pad: int, device, room: int = 64):
    """Inputs of ``model.generate`` for one batch of prompts (token ids), every prompt token but
    the last already in a KV cache: the shared start (at least :data:`GENERATE_SHARED_MIN`
    tokens) once per adapter, each distinct (adapter, prompt) once, laid out as shared start,
    padding, the rest; nothing to share: left padding, an empty cache. Returns (``input_ids``
    and ``attention_mask``, ``{CACHE: the cache}``)."""
    n = len(rows)
    who = names or [None] * n
    shared = min(len(os.path.commonprefix(rows)), min(len(r) for r in rows) - 1)
    keys = list(dict.fromkeys((w, tuple(r)) for w, r in zip(who, rows)))  # distinct, in order
    if not SHARE_PROMPTS or (shared < GENERATE_SHARED_MIN and len(keys) == n):
        return _left_padded(rows, pad, device), {CACHE: roomy_cache(room)}
    shared, width = max(shared, 0), max(len(r) for r in rows)
    enc = _left_padded(rows, pad, device, shared)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    adapters = list(dict.fromkeys(who))
    first = {k: i for i, k in reversed(list(enumerate(zip(who, map(tuple, rows)))))}  # key -> first row
    distinct = [first[k] for k in keys]
    hooks = _adapter_hooks(adapters if names is not None else None, device)
    cache = None
    if shared:  # the shared start, once per adapter
        start = ids[:1, :shared].expand(len(adapters), shared)
        cache = model(
            input_ids=start, **{CACHE: roomy_cache(room)}, use_cache=True, logits_to_keep=1, **hooks
        )[CACHE]
        cache.batch_select_indices(torch.tensor([adapters.index(who[i]) for i in distinct], device=device))
    if width - 1 > shared:  # the rest of each distinct prompt but its last token
        hooks = _adapter_hooks([who[i] for i in distinct] if names is not None else None, device)
        d = torch.tensor(distinct, device=device)
        cache = model(
            input_ids=ids[d, shared : width - 1],
            attention_mask=mask[d, : width - 1],
            position_ids=pos[d, shared : width - 1],
            **{CACHE: cache if cache is not None else roomy_cache(room)},
            use_cache=True,
            logits_to_keep=1,
            **hooks,
        )[CACHE]
    if cache is None:  # one-token prompts: nothing to compute ahead
        return _left_padded(rows, pad, device), {CACHE: roomy_cache(room)}
    index = [distinct.index(first[(w, tuple(r))]) for w, r in zip(who, rows)]
    cache.batch_select_indices(torch.tensor(index, device=device))
    return enc, {CACHE: cache}


def _left_padded(rows: list[list[int]], pad: int, device="cpu", shared: int = 0) -> dict[str, torch.Tensor]:
    """``rows`` as one batch: the first ``shared`` tokens (common to all), padding, the rest."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        cols = [*range(shared), *range(width - len(r) + shared, width)]
        ids[i, cols] = torch.tensor(r, dtype=torch.long)
        mask[i, cols] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


SHARED_PREFIX_MIN = 16
"""Tokens two prompts must share at the start for their common prefix to be computed once."""


@torch.no_grad()
def continuation_logprobs(
    model, pad: int, prompts, conts, *, batch_size: int = 8, adapter_names: list[str] | None = None
) -> list[list[float]]:
    """Summed log-probability of each continuation after its prompt (token ids), each row
    under its own adapter; prompts of one adapter that begin alike share a row, their prefix
    computed once (:func:`_segments`, :func:`_tree_logprobs`): as scored alone, up to rounding."""
    install()
    device = next(model.parameters()).device
    batches = _batches(prompts, conts, adapter_names, batch_size)
    out: list[list[float]] = [[] for _ in prompts]
    with tqdm(total=len(prompts), desc="score", unit="prompt") as bar:
        for batch in batches:
            got = _tree_logprobs(model, batch, prompts, conts, pad=pad, device=device, names=adapter_names)
            for i, lp in got.items():
                out[i] = lp
            bar.update(sum(len(s[1]) for s in batch))
    return out


def _batches(prompts, conts, adapter_names, batch_size: int) -> list[list[tuple[int, list[int]]]]:
    """The rows of :func:`_segments` in batches of at most ``batch_size`` requests, longest first."""
    segments = _segments(prompts, adapter_names, batch_size)
    segments.sort(key=lambda seg: -_row_length(seg, prompts, conts))
    batches, held = [], batch_size  # as if a batch were full: the first row opens one
    for seg in segments:
        if held + len(seg[1]) > batch_size:
            batches.append([])
            held = 0
        batches[-1].append(seg)
        held += len(seg[1])
    return batches


def _segments(prompts, adapter_names, max_items: int) -> list[tuple[int, list[int]]]:
    """Requests grouped into rows: ``(shared, [request indices])``, the first ``shared``
    tokens common to every prompt of the row (0: a row of one request). Of the ways to cut
    the requests, sorted by adapter and prompt, into runs of at most ``max_items`` sharing at
    least :data:`SHARED_PREFIX_MIN` tokens, the one computing the fewest tokens (dynamic
    programming over the cut points)."""
    names = adapter_names or [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (names[i], list(prompts[i]), i))
    n = len(order)
    lens = [len(prompts[i]) for i in order]
    near = [
        len(os.path.commonprefix([prompts[order[k]], prompts[order[k + 1]]]))
        if names[order[k]] == names[order[k + 1]]
        else 0
        for k in range(n - 1)
    ]
    best = [0] + [None] * n  # best[j]: fewest tokens for the first j requests
    start = [0] * (n + 1)
    shared_at = [0] * (n + 1)
    for j in range(1, n + 1):  # the last run ends with request j - 1
        total, common, shortest = 0, None, None
        for i in range(j - 1, max(-1, j - 1 - max(1, max_items)), -1):  # the run is i .. j - 1
            total += lens[i]
            shortest = lens[i] if shortest is None else min(shortest, lens[i])
            if i < j - 1:
                common = near[i] if common is None else min(common, near[i])
                shared = min(common, shortest - 1)  # every request keeps a token of its own
                if shared < SHARED_PREFIX_MIN:
                    break  # a longer run shares no more
            else:
                shared = 0
            cost = best[i] + total - (j - 1 - i) * shared
            if best[j] is None or cost < best[j]:
                best[j], start[j], shared_at[j] = cost, i, shared
    runs, j = [], n
    while j > 0:
        i = start[j]
        runs.append((shared_at[j], [order[k] for k in range(i, j)]))
        j = i
    return runs[::-1]


def _row_length(segment, prompts, conts) -> int:
    """Tokens a row computes: its shared prefix, each request's rest and continuations."""
    shared, idx = segment
    return shared + sum(len(prompts[i]) - shared + sum(max(len(c) - 1, 0) for c in conts[i]) for i in idx)


def _tree_logprobs(model, segments, prompts, conts, *, pad, device, names=None) -> dict[int, list[float]]:
    """One forward pass for a batch of rows, each one segment of :func:`_segments`: its shared
    prefix once, then per request the rest of its prompt and every continuation's tokens but
    the last, under a 4D tree mask (requests never see each other, nor continuations each
    other), at each request's own positions; only the logits that score are kept."""
    widths = [_row_length(seg, prompts, conts) for seg in segments]
    b, total = len(segments), max(widths)
    ids = torch.full((b, total), pad, dtype=torch.long)
    pos = torch.zeros((b, total), dtype=torch.long)
    attend = torch.eye(total, dtype=torch.bool).repeat(b, 1, 1)  # padding sees itself: no empty row
    wanted: dict[int, tuple[int, dict]] = {}  # request -> (row, {(j, k): column})
    rows_adapter = []
    for r, (shared, idx) in enumerate(segments):
        first = prompts[idx[0]]
        ids[r, :shared] = torch.tensor(first[:shared], dtype=torch.long)
        pos[r, :shared] = torch.arange(shared)
        attend[r, :shared, :shared] = torch.ones((shared, shared), dtype=torch.bool).tril()
        col = shared
        for i in idx:
            own = prompts[i][shared:]
            n = len(own)
            span = slice(col, col + n)
            ids[r, span] = torch.tensor(own, dtype=torch.long)
            pos[r, span] = torch.arange(shared, shared + n)
            attend[r, span, :shared] = True
            attend[r, span, span] = torch.ones((n, n), dtype=torch.bool).tril()
            where = {(-1, 0): col + n - 1}  # the last prompt token predicts every first token
            col += n
            for j, x in enumerate(conts[i]):
                for k in range(len(x) - 1):
                    ids[r, col] = x[k]
                    pos[r, col] = len(prompts[i]) + k
                    attend[r, col, :shared] = True
                    attend[r, col, span] = True
                    attend[r, col, col - k : col + 1] = True  # its own continuation's tokens 0..k
                    where[(j, k)] = col
                    col += 1
            wanted[i] = (r, where)
        rows_adapter.append(names[idx[0]] if names is not None else None)
    keep = sorted({c for _, where in wanted.values() for c in where.values()})
    kwargs = _adapter_hooks(rows_adapter if names is not None else None, device)
    logits = model(
        input_ids=ids.to(device),
        attention_mask=attend[:, None].to(device),
        position_ids=pos.to(device),
        use_cache=False,
        logits_to_keep=torch.tensor(keep, device=device),
        **kwargs,
    ).logits  # (b, len(keep), vocab)
    return _continuation_scores(logits, keep, wanted, conts)


def _continuation_scores(logits, keep, wanted, conts) -> dict[int, list[float]]:
    """Each request's summed log-probability per continuation, from the ``logits`` kept at
    columns ``keep`` and ``wanted``: request -> (row, {(continuation, token): column}), read
    for the whole batch at once (one copy to the host)."""
    index = {c: q for q, c in enumerate(keep)}
    places, at = [], {}  # (row, kept column) of each position read; (request, key) -> its place
    for i, (r, where) in wanted.items():
        for key, col in where.items():  # (-1, 0) first, then each continuation's tokens in order
            at[i, key] = len(places)
            places.append((r, index[col]))
    reads = [  # (place, token) of every token of every continuation, in order
        (at[i, (j, k - 1) if k else (-1, 0)], token)
        for i in wanted
        for j, x in enumerate(conts[i])
        for k, token in enumerate(x)
    ]
    got = iter([])
    if reads:  # one log-softmax per place read, one copy to the host
        rows, cols = torch.tensor(places, device=logits.device).T
        logp = torch.log_softmax(logits[rows, cols].float(), -1)
        at, tokens = torch.tensor(reads, device=logits.device).T
        got = iter(logp[at, tokens].tolist())

    def summed(x):  # an empty continuation (an empty answer): log 1, as vLLM's
        lp = next(got) if x else 0.0
        for _ in x[1:]:
            lp += next(got)
        return lp

    return {i: [summed(x) for x in conts[i]] for i in wanted}
