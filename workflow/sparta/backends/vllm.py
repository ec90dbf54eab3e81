"""vLLM backend: one ``vllm.LLM`` per job holds the base; each member is a ``LoRARequest``.

Prompts arrive as token ids made as for the Hugging Face backend, and answers come back as
token ids that sparta decodes itself (``detokenize=False``). Each request has its own seed, so
a rerun samples the same answers; on vLLM's V2 model runner (the default for every engine
sparta starts) a row's draws do not depend on its batch, its logits may unless
``vllm.batch_invariant`` is on. On the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``) seeded rows
are sampled one by one.

Scoring reads each prompt once: every distinct prefix of the candidates (the prompt, the
prompt and a candidate's first token, ...) is a one-token request whose top log-probabilities
(``logprobs``, vLLM's ``max_logprobs``, 20) give the next token of every candidate below it,
the longer prefixes read from vLLM's prefix cache. A candidate token outside the top ones is
scored by a request of its own over prompt and candidate (V2: ``prompt_logprob_token_ids``;
V1: ``prompt_logprobs=1``; :data:`TREE_SCORING` off: every candidate).

vLLM is imported only here, in the GPU environment ``envs/vllm.yaml``, with its FlashInfer
sampler off (``VLLM_USE_FLASHINFER_SAMPLER=0`` unless set: its warm-up compiles CUDA code with
``nvcc``, which fails on nodes without a CUDA toolkit; seeded requests never take it).
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np

from ..chat import stop_token_ids
from ..members import MemberSpec, check_adapter_folder, local_folder
from ..modelfiles import VLLM_LORA_RANKS, lora_rank, vllm_lora_problems
from ..models import check_gpu_dtype, load_tokenizer
from ..settings import BackendSettings, Runtime, Sampling, VLLMSettings
from . import Backend, Generation, decode_answer

log = logging.getLogger(__name__)

LORA_RANKS = VLLM_LORA_RANKS  # the values vLLM accepts for max_lora_rank

INSTALL = (
    "backend: vllm runs in the GPU environment envs/vllm.yaml: run snakemake with "
    "--software-deployment-method conda (the Slurm profile slurm/config.yaml sets it), which builds "
    "that env and runs this job in it; or set backend: hf"
)


def adapter_config(folder: str) -> dict:
    return json.loads((check_adapter_folder(folder) / "adapter_config.json").read_text())


def max_lora_rank(specs) -> int:
    """The smallest rank vLLM accepts that holds every adapter of ``specs`` (their largest
    ``r`` or ``rank_pattern`` override)."""
    need = max([lora_rank(adapter_config(s.adapter)) for s in specs if s.adapter] or [1])
    for r in LORA_RANKS:
        if r >= need:
            return r
    raise ValueError(f"LoRA rank {need} is larger than vLLM supports ({LORA_RANKS[-1]})")


def check_adapters(specs) -> None:
    """Every adapter of ``specs`` is one vLLM serves (checked again: a file may have changed)."""
    problems = [
        f"member {s.name}: {s.adapter}: {p}"
        for s in specs
        if s.adapter
        for p in vllm_lora_problems(adapter_config(s.adapter))
    ]
    if problems:
        raise ValueError("backend vllm cannot serve these adapters:\n  - " + "\n  - ".join(problems))


def _import_vllm(options: VLLMSettings):
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    # vLLM's own logging set-up would silence the job log's loggers: its records go through root
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    if options.batch_invariant:
        os.environ.setdefault("VLLM_BATCH_INVARIANT", "1")
    try:
        import vllm
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError(f"{INSTALL} ({e})") from e
    return vllm


STARTED: list[str] = []  # the engines this process started (sparta.jobs.finish)

BLAS_THREADS = ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def engine_dtype(dtype: str) -> str:
    """The dtype the engine runs: on a CUDA GPU ``dtype`` (checked against the GPU); on vLLM's
    CPU build ``auto`` is float32, as on the Hugging Face backend, so vLLM's own default never
    picks a precision the CPU emulates. Neither: this job cannot run vLLM."""
    import torch

    if torch.cuda.is_available():
        check_gpu_dtype(dtype, torch.device("cuda"))
        return dtype
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        # vLLM binds its worker's OpenMP threads to the cores it picks; a BLAS thread count
        # inherited from the job (Snakemake sets MKL_NUM_THREADS) oversubscribes them: on 2
        # cores the embedded pool's combat took 5 minutes instead of 7 s
        for var in BLAS_THREADS:
            os.environ.pop(var, None)
        return "float32" if dtype == "auto" else dtype
    raise RuntimeError(
        "backend: vllm needs a CUDA GPU (or vLLM's CPU build), and this job sees neither: "
        "ask for a GPU (resources.<stage>.gpu)"
    )


def engine_kwargs(base: str, adapters, options: VLLMSettings, dtype: str, seed: int) -> dict:
    """The arguments of ``vllm.LLM`` for ``base`` serving the LoRA ``adapters`` (specs)."""
    kwargs = dict(
        model=base,
        tokenizer=base,
        dtype=dtype,
        seed=seed,
        tensor_parallel_size=options.tensor_parallel_size,
        gpu_memory_utilization=options.gpu_memory_utilization,
        enable_prefix_caching=options.enable_prefix_caching,
        enforce_eager=options.enforce_eager,
    )
    if options.max_model_len:
        kwargs["max_model_len"] = options.max_model_len
    if adapters:
        kwargs.update(
            enable_lora=True,
            max_loras=max(1, min(len(adapters), options.max_loras or len(adapters))),
            max_lora_rank=max_lora_rank(adapters),
        )
    return kwargs


def sampling_params(sampling: Sampling, seed: int, stops: list[int]):
    """One generation request's ``vllm.SamplingParams``: its own seed, stopped by the chat
    template's end-of-turn ids, answered as token ids (sparta decodes them itself)."""
    from vllm import SamplingParams

    return SamplingParams(
        n=1,
        temperature=0.0 if sampling.greedy else sampling.temperature,
        top_p=1.0 if sampling.greedy else sampling.top_p,
        top_k=-1 if sampling.greedy or not sampling.top_k else sampling.top_k,
        max_tokens=sampling.max_new_tokens,
        stop_token_ids=stops,
        seed=int(seed),
        detokenize=False,
    )


def scoring_params(ids: list[int], start: int, by_token_ids: bool):
    """``vllm.SamplingParams`` for the log-probability of ``ids[start:]`` given
    ``ids[:start]`` (``start >= 1``). ``by_token_ids`` (V2 runner): one token per scored row
    in ``prompt_logprob_token_ids``, row i predicting prompt token ``start + i``; otherwise
    every prompt position's log-probability (``prompt_logprobs``)."""
    from vllm import SamplingParams

    if by_token_ids:
        return SamplingParams(
            max_tokens=1,
            temperature=0.0,
            detokenize=False,
            prompt_logprob_token_ids=[[t] for t in ids[start:]],
            prompt_logprob_start=start - 1,
        )
    return SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1, detokenize=False)


TREE_SCORING = True
"""Score candidates through their shared prefixes (one prefill per prompt); False: one
prompt-scoring request per candidate."""
TOP_LOGPROBS = 20  # vLLM's default max_logprobs: the next-token log-probabilities a prefix returns


def next_token_params():
    """``vllm.SamplingParams`` of a scoring prefix: one greedy token (thrown away) and the top
    log-probabilities of the next token, raw (before any sampling setting)."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS, detokenize=False)


def scoring_tree(members, prompts, conts) -> tuple[list[tuple], list[tuple[int, int, list]]]:
    """The distinct prefixes that score ``conts`` (per prompt, its candidate continuations):
    the prefixes as (member, token ids), and for each non-empty continuation (prompt i,
    candidate j) its path: (prefix index, token) per token."""
    index: dict[tuple, int] = {}
    prefixes: list[tuple] = []
    paths = []
    for i, (prompt, row) in enumerate(zip(prompts, conts)):
        if len(prompt) < 1:
            raise ValueError("a scored continuation needs a prompt of at least one token")
        for j, cont in enumerate(row):
            path = []
            for k, token in enumerate(cont):
                ids = tuple(prompt) + tuple(cont[:k])
                key = (members[i].adapter, ids)
                if key not in index:
                    index[key] = len(prefixes)
                    prefixes.append((members[i], list(ids)))
                path.append((index[key], int(token)))
            if path:
                paths.append((i, j, path))
    return prefixes, paths


def summed_logprob(output, ids: list[int], start: int) -> float:
    """The log-probability of ``ids[start:]`` given ``ids[:start]``, from a ``RequestOutput``
    of :func:`scoring_params` (``prompt_token_id_logprobs`` or ``prompt_logprobs``)."""
    scores = getattr(output, "prompt_token_id_logprobs", None)
    if scores is not None:
        return float(np.asarray(scores, dtype=np.float64)[:, 0].sum())
    lps = output.prompt_logprobs
    if lps is None:
        raise RuntimeError(f"vLLM returned no log-probabilities for scoring request {output.request_id}")
    return sum(lps[k][ids[k]].logprob for k in range(start, len(ids)))


def uses_v2_runner(llm) -> bool:
    """Whether ``llm`` (a ``vllm.LLM``) runs vLLM's V2 model runner: batched seeded sampling
    and ``prompt_logprob_token_ids`` scoring."""
    config = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    return bool(getattr(config, "use_v2_model_runner", False))


def lora_request(name: str, int_id: int, folder: str):
    from vllm.lora.request import LoRARequest

    return LoRARequest(name, int_id, folder)


class VLLMEngine:
    """One ``vllm.LLM`` holding ``base``; ``specs`` are every member it will serve (they set
    ``max_loras`` and ``max_lora_rank``)."""

    def __init__(self, base: str, specs, options: VLLMSettings, dtype: str = "auto", seed: int = 0):
        vllm = _import_vllm(options)
        dtype = engine_dtype(dtype)
        base = local_folder(base)  # a hub id: its snapshot folder in the cache (sparta.hub)
        self.tok = load_tokenizer(base)
        self._ids: dict[str, int] = {}
        # scoring's requests, prompt tokens sent, computed (not cached), and scored prompts' lengths
        self.scoring_tokens = {"requests": 0, "prompt": 0, "computed": 0, "once": 0, "prompts": 0}
        adapters = [s for s in specs if s.adapter]
        check_adapters(adapters)
        kwargs = engine_kwargs(base, adapters, options, dtype, seed)
        log.info("starting vLLM on %s with %d LoRA adapter(s): %s", base, len(adapters), kwargs)
        self.llm = vllm.LLM(**kwargs)
        STARTED.append(base)
        self.v2 = uses_v2_runner(self.llm)
        # vLLM 0.32's CPU build fails on a batch of prompt log-probability requests with LoRA
        # adapters (its CPU LoRA logits op gets the sampled rows' adapter indices for the prompt
        # rows): there each scoring request is a call of its own
        from vllm.platforms import current_platform

        self.one_scoring_request_a_call = bool(adapters) and current_platform.is_cpu()
        if self.v2:
            log.info("vLLM V2 model runner: seeded sampling in one kernel, only the continuation scored")
        else:
            log.warning(
                "vLLM runs its V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0 or a feature V2 lacks): "
                "seeded requests are sampled row by row and scoring asks for every prompt position"
            )

    def _lora(self, spec: MemberSpec):
        if spec.adapter is None:
            return None
        if spec.adapter not in self._ids:
            self._ids[spec.adapter] = len(self._ids) + 1  # lora_int_id must be > 0 and unique
        return lora_request(spec.name, self._ids[spec.adapter], local_folder(spec.adapter))

    def generate(self, members, prompts, sampling: Sampling, seeds) -> list[Generation]:
        if not prompts:
            return []
        stops = stop_token_ids(self.tok)
        params = [sampling_params(sampling, seed, stops) for seed in seeds]
        requests = [{"prompt_token_ids": list(ids)} for ids in prompts]
        loras = [self._lora(m) for m in members]
        outs = self.llm.generate(requests, params, lora_request=loras, use_tqdm=True)
        return [
            decode_answer(self.tok, list(o.outputs[0].token_ids), stops, o.outputs[0].finish_reason == "stop")
            for o in outs
        ]

    def _count(self, outputs) -> None:
        for out in outputs:
            n = len(out.prompt_token_ids or [])
            cached = int(getattr(out, "num_cached_tokens", 0) or 0)
            self.scoring_tokens["requests"] += 1
            self.scoring_tokens["prompt"] += n
            self.scoring_tokens["computed"] += n - cached

    def continuation_logprobs(self, members, prompts, conts) -> list[list[float]]:
        """Log-probability of each continuation given its prompt, summed over its tokens (0
        for an empty one): through the candidates' shared prefixes (module docstring), the
        rest by :meth:`prompt_scores`."""
        scored = {
            (members[i].adapter, tuple(p)) for i, (p, row) in enumerate(zip(prompts, conts)) if any(row)
        }
        self.scoring_tokens["once"] += sum(len(ids) for _, ids in scored)
        self.scoring_tokens["prompts"] += len(scored)
        if not TREE_SCORING:
            return self.prompt_scores(members, prompts, conts)
        before = dict(self.scoring_tokens)
        prefixes, paths = scoring_tree(members, prompts, conts)
        result: list[list[float]] = [[0.0] * len(row) for row in conts]
        roots = sorted({path[0][0] for _, _, path in paths})
        rest = sorted(set(range(len(prefixes))) - set(roots))
        nexts: list = [None] * len(prefixes)
        for batch in (roots, rest):  # the prompts first: the longer prefixes read them from the cache
            if not batch:
                continue
            outs = self.llm.generate(
                [{"prompt_token_ids": prefixes[n][1]} for n in batch],
                next_token_params(),
                lora_request=[self._lora(prefixes[n][0]) for n in batch],
                use_tqdm=False,
            )
            self._count(outs)
            for n, out in zip(batch, outs):
                nexts[n] = out.outputs[0].logprobs[0]
        missing = []
        for i, j, path in paths:
            found = [nexts[n].get(token) for n, token in path]
            if any(lp is None for lp in found):
                missing.append((i, j))
            else:
                result[i][j] = float(sum(lp.logprob for lp in found))
        if missing:
            exact = self.prompt_scores(
                [members[i] for i, _ in missing],
                [prompts[i] for i, _ in missing],
                [[conts[i][j]] for i, j in missing],
            )
            for (i, j), row in zip(missing, exact):
                result[i][j] = row[0]
        done = {k: self.scoring_tokens[k] - before[k] for k in before}
        log.info(
            f"scored {sum(len(row) for row in conts)} continuations of {len(prompts)} prompts: "
            f"{done['requests']} requests ({len(missing)} outside the top {TOP_LOGPROBS}), "
            f"{done['prompt']} prompt tokens, {done['computed']} computed (the rest from the prefix cache)"
        )
        return result

    def prompt_scores(self, members, prompts, conts) -> list[list[float]]:
        """Prompt log-probabilities of prompt + continuation, summed over the continuation
        (0 for an empty one, which needs no request); identical requests sent once."""
        flat = [(i, list(p) + list(c), len(p)) for i, (p, row) in enumerate(zip(prompts, conts)) for c in row]
        result: list[list[float]] = [[] for _ in prompts]
        asked: dict[tuple, int] = {}  # (adapter, tokens, start) -> index in the requests
        requests, params, loras, order = [], [], [], []
        for i, ids, start in flat:
            if start < 1:
                raise ValueError("a scored continuation needs a prompt of at least one token")
            if len(ids) == start:
                order.append(None)
                continue
            key = (members[i].adapter, tuple(ids), start)
            if key not in asked:
                asked[key] = len(requests)
                requests.append({"prompt_token_ids": ids})
                params.append(scoring_params(ids, start, self.v2))
                loras.append(self._lora(members[i]))
            order.append(asked[key])
        if self.one_scoring_request_a_call:
            outs = [
                self.llm.generate([r], [p], lora_request=[lr], use_tqdm=False)[0]
                for r, p, lr in zip(requests, params, loras)
            ]
        else:
            outs = self.llm.generate(requests, params, lora_request=loras, use_tqdm=True) if requests else []
        self._count(outs)
        for (i, ids, start), k in zip(flat, order):
            result[i].append(0.0 if k is None else summed_logprob(outs[k], ids, start))
        return result


class VLLMBackend(Backend):
    """One engine per job, started on first use for the base of the first member served; all
    members of that base are LoRA requests of it, mixed freely within a call."""

    def __init__(self, options: VLLMSettings, runtime: Runtime, specs):
        self.options, self.runtime, self.specs = options, runtime, list(specs)
        self.engine: VLLMEngine | None = None
        self.base: str | None = None

    def _engine(self, members) -> VLLMEngine:
        for spec in members:
            if self.engine is None:
                same = [s for s in self.specs if s.base == spec.base]
                same += [m for m in members if m.base == spec.base and m not in same]
                self.base = spec.base
                self.engine = VLLMEngine(spec.base, same, self.options, self.runtime.dtype, self.runtime.seed)
            elif spec.base != self.base:
                raise ValueError(
                    f"backend vllm serves one base model per job; {spec.name} needs {spec.base} but "
                    f"this job already holds {self.base}. Give every member of a pool "
                    "(and evaluation.judge) the same base, or set backend: hf"
                )
        return self.engine

    def tokenizer(self, spec: MemberSpec):
        return self._engine([spec]).tok

    def generate(self, members, prompts, sampling, seeds, **batching) -> list[Generation]:
        return self._engine(members).generate(members, prompts, sampling, seeds)  # vLLM batches by itself

    def continuation_logprobs(self, members, prompts, conts, batch_size=8) -> list[list[float]]:
        return self._engine(members).continuation_logprobs(members, prompts, conts)


def open_backend(backend: BackendSettings, runtime: Runtime, specs) -> VLLMBackend:
    return VLLMBackend(backend.vllm, runtime, specs)
