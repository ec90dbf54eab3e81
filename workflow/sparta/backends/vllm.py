"""vLLM backend: one ``vllm.LLM`` per job holds the base; each member is a ``LoRARequest``.

Prompts arrive as token ids, made with the same chat template and tokenizer as for the
Hugging Face backend, so both see identical inputs. Each request gets its own seed (derived
from the call's seed and the prompt's position), so sampling does not depend on how vLLM
batches requests. vLLM is imported only here (``pip install -e '.[vllm]'`` or
``envs/vllm.yaml``).
"""

from __future__ import annotations

import json
import logging

from ..chat import stop_token_ids
from ..members import MemberSpec, check_adapter_folder, local_folder
from ..models import load_tokenizer
from ..settings import BackendSettings, Runtime, Sampling, VLLMSettings
from . import Backend, Generation, decode_answer

log = logging.getLogger(__name__)

# LoRA ranks vLLM accepts for max_lora_rank
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def adapter_rank(folder: str) -> int:
    cfg = json.loads((check_adapter_folder(folder) / "adapter_config.json").read_text())
    return int(cfg.get("r", 8))


def max_lora_rank(specs) -> int:
    """The smallest rank vLLM accepts that holds every adapter of ``specs``."""
    need = max([adapter_rank(s.adapter) for s in specs if s.adapter] or [1])
    for r in LORA_RANKS:
        if r >= need:
            return r
    raise ValueError(f"LoRA rank {need} is larger than vLLM supports ({LORA_RANKS[-1]})")


class VLLMEngine:
    """One ``vllm.LLM`` holding ``base``; ``specs`` are every member it will serve (they set
    ``max_loras`` and ``max_lora_rank``)."""

    def __init__(self, base: str, specs, options: VLLMSettings, dtype: str = "auto", seed: int = 0):
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError(
                "backend: vllm needs vLLM on a GPU machine: pip install -e '.[vllm]' or use "
                "--software-deployment-method conda (envs/vllm.yaml); or set backend: hf"
            ) from e
        base = local_folder(base)  # a hub id: its snapshot folder in the cache (sparta.hub)
        self.tok = load_tokenizer(base)
        self._ids: dict[str, int] = {}
        adapters = [s for s in specs if s.adapter]
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
        log.info("starting vLLM on %s with %d LoRA adapter(s): %s", base, len(adapters), kwargs)
        self.llm = LLM(**kwargs)

    def _lora(self, spec: MemberSpec):
        if spec.adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        if spec.adapter not in self._ids:
            self._ids[spec.adapter] = len(self._ids) + 1  # lora_int_id must be > 0 and unique
        return LoRARequest(spec.name, self._ids[spec.adapter], local_folder(spec.adapter))

    def generate(self, members, prompts, sampling: Sampling, seeds) -> list[Generation]:
        from vllm import SamplingParams

        if not prompts:
            return []
        stops = stop_token_ids(self.tok)
        params = [
            SamplingParams(
                n=1,
                temperature=0.0 if sampling.greedy else sampling.temperature,
                top_p=1.0 if sampling.greedy else sampling.top_p,
                top_k=-1 if sampling.greedy or not sampling.top_k else sampling.top_k,
                max_tokens=sampling.max_new_tokens,
                stop_token_ids=stops,
                seed=int(seed),
                skip_special_tokens=True,
            )
            for seed in seeds
        ]
        requests = [{"prompt_token_ids": list(ids)} for ids in prompts]
        loras = [self._lora(m) for m in members]
        outs = self.llm.generate(requests, params, lora_request=loras, use_tqdm=True)
        return [
            decode_answer(self.tok, list(o.outputs[0].token_ids), stops, o.outputs[0].finish_reason == "stop")
            for o in outs
        ]

    def continuation_logprobs(self, members, prompts, conts) -> list[list[float]]:
        """Prompt log-probabilities of prompt + continuation, summed over the continuation."""
        from vllm import SamplingParams

        flat = [(i, p + c, len(p)) for i, (p, row) in enumerate(zip(prompts, conts)) for c in row]
        if not flat:
            return [[] for _ in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outs = self.llm.generate(
            [{"prompt_token_ids": ids} for _, ids, _ in flat],
            params,
            lora_request=[self._lora(members[i]) for i, _, _ in flat],
            use_tqdm=True,
        )
        result: list[list[float]] = [[] for _ in prompts]
        for (i, ids, start), out in zip(flat, outs):
            lps = out.prompt_logprobs
            result[i].append(sum(lps[k][ids[k]].logprob for k in range(start, len(ids))))
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

    def generate(self, members, prompts, sampling, seeds, batch_size=8, desc="generate") -> list[Generation]:
        return self._engine(members).generate(members, prompts, sampling, seeds)  # vLLM batches by itself

    def continuation_logprobs(self, members, prompts, conts, batch_size=8) -> list[list[float]]:
        return self._engine(members).continuation_logprobs(members, prompts, conts)


def open_backend(backend: BackendSettings, runtime: Runtime, specs) -> VLLMBackend:
    return VLLMBackend(backend.vllm, runtime, specs)
