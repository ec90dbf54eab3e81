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
import os
import time

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..chat import stop_token_ids
from ..members import MemberSpec
from ..models import MemberLoader
from ..settings import BackendSettings, Runtime, Sampling
from . import Backend, Generation, decode_answer

log = logging.getLogger(__name__)

# The name of a model's KV cache, as a forward's argument and output: ``cache`` since
# transformers 5.21, ``past_key_values`` before (the GPU env, envs/vllm.yaml, has 5.20, which
# vLLM requires). A wrong name would be swallowed by the forward's **kwargs and silently
# compute without the cache, so it is read off the library, and `make vllm-check` runs the
# backend's tests with the older one.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


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
    tokens depend only on its seed and its own logits, never on the rest of its batch.

    The draw is ``torch.multinomial``'s own one-sample method (the argmax of p / q, q ~ Exp(1)),
    with each row's q drawn from that row's CPU generator and the pick made for the whole batch
    at once: on a CPU exactly ``torch.multinomial(probs[row], 1, generator=row's)`` (tested), on
    a GPU the same random numbers as on a CPU, and a few kernels a step instead of about ten
    per row (a row's multinomial checks, divides and reduces alone: at 64-128 rows a step,
    several hundred launches; the H200's decoding step cost 1.8-2.5 ms per row: docs/results.md).
    The q of several steps are drawn at once (:meth:`exponentials`), so a step's host work does
    not grow with its rows."""

    def __init__(self, seeds, sampling: Sampling):
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.sampling = sampling
        self.ahead: torch.Tensor | None = None  # (rows, steps, k) drawn ahead, on the scores' device
        self.step = 0  # the next step of ``ahead``

    def __call__(self, input_ids, scores):
        drawn = self.draw(scores)[:, None]
        return torch.full_like(scores, float("-inf")).scatter_(1, drawn, 0.0)

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
        """This step's q (rows, k), float32 Exp(1): each row's next k numbers of its generator.

        A CPU generator's ``exponential_`` fills a tensor in order, so drawing n steps of k at
        once gives each step the numbers that n draws of k give (tested): the rows' draws are
        made for up to ``max_new_tokens`` steps at a time (at most :data:`DRAW_AHEAD` numbers)
        and copied to the device once, instead of one draw per row and a copy at every step."""
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
"""Random numbers :class:`SeededSampler` draws ahead at most (16 MB as float32): at 128 rows
and top-k 50, 655 steps; over a whole vocabulary of 49,152, one step at a time."""


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

    Prompts are sorted by length (alike prompts side by side) and generated in batches; each
    row uses its own adapter (``adapter_names``) and its own seed (``seeds``). A batch's
    prompts are prefilled by :func:`_prefilled`: the start they all share (system prompt,
    template, a judge's rubric) once per adapter, a prompt asked several times of one adapter
    (a judge's samples) once, then the cache is spread to every row; an answer is what
    generating it alone gives, up to float rounding. Decoding is :func:`_decode`: a row that
    has ended its turn leaves the batch (``OWN_DECODING``)."""
    if not prompts:
        return []
    device = next(model.parameters()).device
    stops = stop_token_ids(tok)
    names = adapter_names or [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), prompts[i], names[i], i))
    out: list[Generation | None] = [None] * len(prompts)
    config = _generation_config(sampling.max_new_tokens, tok.pad_token_id, stops)
    started, logged = time.perf_counter(), 0
    with tqdm(total=len(prompts), desc=desc, unit="prompt") as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            rows = [prompts[i] for i in idx]
            who = [adapter_names[i] for i in idx] if adapter_names is not None else None
            enc, extra = _prefilled(model, rows, who, tok.pad_token_id, device, sampling.max_new_tokens)
            sampler = None if sampling.greedy else SeededSampler([seeds[i] for i in idx], sampling)
            if OWN_DECODING:
                new = _decode(
                    model, enc, extra[CACHE], who, sampler, sampling.max_new_tokens, stops, tok.pad_token_id
                )
            else:  # transformers' generate (tests and benchmarks compare)
                extra.update(_adapter_hooks(who, device))
                if sampler is not None:
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


def _generation_config(max_new_tokens: int, pad: int, stops) -> GenerationConfig:
    """``model.generate``'s config, explicit: nothing from the checkpoint's generation_config
    (penalties, sampling flags) is applied behind our back; sampling is the SeededSampler's."""
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
"""False: PEFT's own mixed-adapter path, rebuilding each adapter's rows from the list of
names in every LoRA layer at every forward (tests and benchmarks compare)."""


class AdapterRows(list):
    """``adapter_names`` of a mixed-adapter batch: each row's adapter, as PEFT reads it, and
    each adapter's rows as one index tensor on the device, built once per batch (``rows``:
    adapter -> rows, None when every row has that adapter).

    PEFT's ``lora.Linear`` makes the index lists again in every LoRA layer at every forward,
    and indexes with them: three tensors built from Python data per layer and adapter (on a
    GPU, three host-to-device copies). :func:`_rows_forward` reads these instead."""

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
    if not ROW_INDEX:
        return {"adapter_names": list(names)}
    _install_rows_forward()
    return {"adapter_names": AdapterRows(names, device)}


def _rows_forward(self, x, *args, adapter_names, **kwargs):
    """PEFT's ``lora.Linear._mixed_batch_forward`` with the rows of :class:`AdapterRows`: the
    same sub-batches, products and sums, so the same numbers; each adapter's rows taken with
    ``index_select`` and added back with ``index_add_`` (no index from a Python list), and
    none taken when one adapter has the whole batch. Anything else (plain names, a LoRA
    variant such as aLoRA, variant arguments) goes to PEFT's own method."""
    rows = getattr(adapter_names, "rows", None)
    variant = any(kwargs.get(k) is not None for k in _PEFT["variant_keys"])
    if rows is None or self.lora_variant or variant:
        return _PEFT["forward"](self, x, *args, adapter_names=adapter_names, **kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k not in _PEFT["variant_keys"]}
    result = self.base_layer(x, *args, **kwargs)
    for name, index in rows.items():
        if name not in self.lora_A:  # the base's rows ("__base__"), or no LoRA of it here
            continue
        lora_A, lora_B = self.lora_A[name], self.lora_B[name]
        sub = x if index is None else x.index_select(0, index)
        out = lora_B(lora_A(self.lora_dropout[name](sub.to(lora_A.weight.dtype)))) * self.scaling[name]
        if index is None:
            result += out.to(result.dtype)
        else:
            result.index_add_(0, index, out.to(result.dtype))
    return result


_PEFT: dict = {}  # PEFT's own method and the variant arguments it takes, once replaced


def _install_rows_forward() -> None:
    """Route ``peft.tuners.lora.layer.Linear._mixed_batch_forward`` through
    :func:`_rows_forward` (once per process; it hands plain name lists back to PEFT)."""
    from peft.tuners.lora import layer

    if layer.Linear._mixed_batch_forward is _rows_forward:
        return
    _PEFT["variant_keys"] = tuple(getattr(layer, "VARIANT_KWARG_KEYS", ("alora_offsets",)))
    _PEFT["forward"] = layer.Linear._mixed_batch_forward
    layer.Linear._mixed_batch_forward = _rows_forward


OWN_DECODING = True
"""False: ``model.generate`` decodes, every row to the batch's end (tests and benchmarks compare)."""
COMPACT_AT = 0.25
"""Finished rows leave the batch once they are this share of it (each leaving copies the cache)."""


def _decode(model, enc, cache, names, sampler, max_new: int, stops, pad: int) -> list[list[int]]:
    """Each row's new tokens (up to and with its stop token), decoded greedily or by
    ``sampler``, from the inputs and cache of :func:`_prefilled`.

    What ``model.generate`` does for these inputs (the same forward calls, positions from the
    attention mask, float32 logits, argmax), but a row that has produced a stop token leaves
    the batch: once finished rows are :data:`COMPACT_AT` of it, the cache, mask, adapter names
    and sampler keep the other rows only. ``generate`` computes every row until the batch's
    longest answer ends; a judge's batch of reasons of 30 to 160 tokens, or an evaluation's
    answers of 5 to 32, spends much of its steps on answers already over. A row's tokens never
    depend on the rest of its batch (its own seed), so leaving changes none of them, up to
    float rounding."""
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
    and values into it. DynamicLayer concatenates: every decoding step copies every layer's
    whole cache (on 2 CPU cores, 83% of a pool judge's decoding time at 48 rows of 500
    tokens); here a step copies its own new tokens only, and the cache is copied once more
    only when it outgrows its room, when rows are selected (room and all), or when something
    else replaces it (reordering makes new tensors, adopted at the next update).
    ``keys``/``values`` are views of the filled part, so everything that reads them sees a
    DynamicLayer."""

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
    """An empty KV cache of :class:`RoomyLayer`s keeping ``room`` tokens of room (the
    tokens still to generate)."""
    cache = DynamicCache()
    if not ROOMY_CACHE:
        return cache
    cache.layer_class_to_replicate = lambda: RoomyLayer(room)
    return cache


def _prefilled(model, rows: list[list[int]], names: list[str] | None, pad: int, device, room: int = 64):
    """Inputs of ``model.generate`` for one batch of prompts (token ids) with every prompt
    token but the last already in a KV cache, each token computed as few times as it can be:
    the start every prompt shares (at least :data:`GENERATE_SHARED_MIN` tokens; every prompt
    keeps one of its own) once per adapter, each distinct (adapter, prompt) once, then the
    cache spread over the rows. Rows are laid out as shared start, padding, the rest (padding
    in the middle, masked; position ids from the mask, so every token has the position it has
    alone). Nothing to share: plain left padding and an empty cache. The cache keeps ``room``
    tokens of room (:class:`RoomyLayer`). Returns (the ``input_ids`` and ``attention_mask``,
    the extra ``generate`` arguments: ``cache``)."""
    n = len(rows)
    who = names or [None] * n
    shared = min(len(os.path.commonprefix(rows)), min(len(r) for r in rows) - 1)
    keys = list(dict.fromkeys((w, tuple(r)) for w, r in zip(who, rows)))  # distinct, in order
    if not SHARE_PROMPTS or (shared < GENERATE_SHARED_MIN and len(keys) == n):
        return {k: v.to(device) for k, v in _left_padded(rows, pad).items()}, {CACHE: roomy_cache(room)}
    shared = max(shared, 0)
    width = max(len(r) for r in rows)
    ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :shared] = torch.tensor(r[:shared], dtype=torch.long)
        ids[i, width - len(r) + shared :] = torch.tensor(r[shared:], dtype=torch.long)
        mask[i, :shared] = 1
        mask[i, width - len(r) + shared :] = 1
    ids, mask = ids.to(device), mask.to(device)
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
        return {k: v.to(device) for k, v in _left_padded(rows, pad).items()}, {CACHE: roomy_cache(room)}
    index = [distinct.index(first[(w, tuple(r))]) for w, r in zip(who, rows)]
    cache.batch_select_indices(torch.tensor(index, device=device))
    return {"input_ids": ids, "attention_mask": mask}, {CACHE: cache}


def _left_padded(rows: list[list[int]], pad: int) -> dict[str, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return {"input_ids": ids, "attention_mask": mask}


SHARED_PREFIX_MIN = 16
"""Tokens two prompts must share at the start for their common prefix to be computed once."""


@torch.no_grad()
def continuation_logprobs(
    model, pad: int, prompts, conts, batch_size: int, adapter_names: list[str] | None = None
) -> list[list[float]]:
    """Summed log-probability of each continuation after its prompt (token ids), each row
    under its own adapter.

    Requests of one adapter whose prompts begin alike (a judge reading several answers to one
    question, an annotator's every pair, a meta-judge's every two judgments of one answer) are
    laid in one row with their common prefix computed once (:func:`_segments`); a batch holds
    at most ``batch_size`` requests and is one forward pass, a tree attention mask keeping the
    requests of a row apart (:func:`_tree_logprobs`). Each request's result is what scoring it
    alone gives, up to float rounding."""
    device = next(model.parameters()).device
    batches = _batches(prompts, conts, adapter_names, batch_size)
    out: list[list[float]] = [[] for _ in prompts]
    with tqdm(total=len(prompts), desc="score", unit="prompt") as bar:
        for batch in batches:
            got = _tree_logprobs(model, batch, prompts, conts, pad, device, adapter_names)
            for i, lp in got.items():
                out[i] = lp
            bar.update(sum(len(s[1]) for s in batch))
    return out


def _batches(prompts, conts, adapter_names, batch_size: int) -> list[list[tuple[int, list[int]]]]:
    """The rows of :func:`_segments` cut into batches of at most ``batch_size`` requests,
    longest rows first (rows of alike length together: little padding)."""
    segments = _segments(prompts, adapter_names, batch_size)
    segments.sort(key=lambda seg: -_row_length(seg, prompts, conts))
    batches, current, held = [], [], 0
    for seg in segments:
        if current and held + len(seg[1]) > batch_size:
            batches.append(current)
            current, held = [], 0
        current.append(seg)
        held += len(seg[1])
    if current:
        batches.append(current)
    return batches


def _segments(prompts, adapter_names, max_items: int) -> list[tuple[int, list[int]]]:
    """Requests grouped into rows: ``(shared, [request indices])``, the first ``shared``
    tokens common to every prompt of the row (0: a row of one request).

    Requests are sorted by adapter and prompt, so prompts that begin alike are neighbours;
    of the ways to cut that order into runs of at most ``max_items`` sharing at least
    :data:`SHARED_PREFIX_MIN` tokens, the one that computes the fewest tokens is taken
    (dynamic programming over the cut points)."""
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
    """Tokens a row computes: its shared prefix, then per request the rest of its prompt and
    every continuation's tokens but the last (an empty continuation computes none)."""
    shared, idx = segment
    return shared + sum(_own_length(prompts[i], conts[i], shared) for i in idx)


def _own_length(prompt, conts, shared: int) -> int:
    """Tokens a request computes after a prefix of ``shared`` tokens: the rest of its prompt
    and every continuation's tokens but the last."""
    return len(prompt) - shared + sum(max(len(c) - 1, 0) for c in conts)


def _tree_logprobs(model, segments, prompts, conts, pad, device, names=None) -> dict[int, list[float]]:
    """One forward pass for a batch of rows, each row one segment of :func:`_segments`: its
    shared prefix once, then per request the rest of its prompt and every continuation's
    tokens but the last, laid side by side. A 4D attention mask lets each request's tokens
    see the shared prefix and its own earlier tokens only, and a continuation token its
    request's prompt and its own continuation's earlier tokens (a tree: requests never see
    each other, nor continuations each other); position ids are each request's own. Only the
    logits of each request's last prompt position and of its continuation tokens are kept."""
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
    columns ``keep`` and ``wanted``: request -> (row, {(continuation, token): column}).

    Read for the whole batch at once: the log-softmax of every position read, then every
    token's log-probability gathered and brought to the host in one copy (not one index,
    log-softmax and copy per request: on a GPU, a wait per request)."""
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
    got = iter(_gathered_logprobs(logits, places, reads))
    result = {}
    for i in wanted:
        scores = []
        for x in conts[i]:
            lp = next(got) if x else 0.0  # an empty continuation (an empty answer): log 1, as vLLM's
            for _ in x[1:]:
                lp += next(got)
            scores.append(lp)
        result[i] = scores
    return result


def _gathered_logprobs(logits, places, reads) -> list[float]:
    """The log-probability of each ``(place, token)`` of ``reads``, a place being a (row,
    column) of ``logits``: one log-softmax per place, one copy to the host."""
    if not reads:
        return []
    rows, cols = torch.tensor(places, device=logits.device).T
    logp = torch.log_softmax(logits[rows, cols].float(), -1)
    at, tokens = torch.tensor(reads, device=logits.device).T
    return logp[at, tokens].tolist()
