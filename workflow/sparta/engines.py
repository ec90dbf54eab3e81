"""Model backends behind one small interface: what combat, judging and evaluation need.

A served member (a base model plus an optional LoRA adapter) has a tokenizer ``tok`` and two
primitives; everything else (judge prompts, the expected score, option log-likelihoods) is
written once on top of them:

- ``generate(texts, sampling, seed, batch_size, desc)``: one :class:`Generation` per prompt
  text (already through the chat template), in input order;
- ``continuation_logprobs(prompts, conts, batch_size)``: for each prompt (token ids) the
  summed log-probability of each of its continuations (token ids).

``hf`` runs Hugging Face transformers + PEFT in this process (CPU or GPU). ``vllm`` runs one
vLLM engine per base model with every member as a ``LoRARequest``; vLLM is imported only
when that backend is chosen (``pip install -e .[vllm]`` or ``envs/vllm.yaml``).
"""

from __future__ import annotations

import json
import logging

from .generate import Generation, SamplingParams, decode_answer, derive_seed, generate, stop_token_ids
from .judge import batched_continuation_logprobs
from .models import MemberLoader, MemberSpec, check_adapter_folder, load_tokenizer

log = logging.getLogger(__name__)

BACKENDS = ("hf", "vllm")
# LoRA ranks vLLM accepts for max_lora_rank
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class HFModel:
    """A Hugging Face model (with its adapter active) and its tokenizer, served in process."""

    backend = "hf"

    def __init__(self, model, tok, activate=None):
        self._model, self.tok, self._activate = model, tok, activate

    @property
    def model(self):
        """The model with this member's adapter active: ``activate()`` (loaded on first use;
        members of one base share its weights), or the model given."""
        return self._activate() if self._activate is not None else self._model

    def generate(
        self, texts, sampling: SamplingParams, seed: int, batch_size: int = 8, desc: str = "generate"
    ):
        return generate(self.model, self.tok, texts, sampling, seed, batch_size, desc)

    def continuation_logprobs(self, prompts, conts, batch_size: int = 8) -> list[list[float]]:
        return batched_continuation_logprobs(self.model, self.tok.pad_token_id, prompts, conts, batch_size)


def adapter_rank(folder: str) -> int:
    cfg = json.loads((check_adapter_folder(folder) / "adapter_config.json").read_text())
    return int(cfg.get("r", 8))


def vllm_max_lora_rank(specs) -> int:
    """The smallest rank vLLM accepts that holds every adapter of ``specs``."""
    need = max([adapter_rank(s.adapter) for s in specs if s.adapter] or [1])
    for r in VLLM_LORA_RANKS:
        if r >= need:
            return r
    raise ValueError(f"LoRA rank {need} is larger than vLLM supports ({VLLM_LORA_RANKS[-1]})")


class VLLMEngine:
    """vLLM backend: one ``vllm.LLM`` holds the base; each member is a ``LoRARequest``.

    ``specs`` are every member this engine will serve (they set ``max_loras`` and
    ``max_lora_rank``). Prompts are passed as token ids, tokenized with the same chat template
    and tokenizer as the Hugging Face backend, so both see identical inputs. Each request gets
    its own seed (derived from the call's seed and the prompt's position), so sampling does
    not depend on how vLLM batches requests.
    """

    def __init__(self, base: str, specs, options: dict, dtype: str = "auto", seed: int = 0):
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError(
                "backend: vllm needs vLLM on a GPU machine: pip install -e '.[vllm]' or use "
                "--software-deployment-method conda (envs/vllm.yaml); or set backend: hf"
            ) from e
        self.tok = load_tokenizer(base)
        self._ids: dict[str, int] = {}
        adapters = [s for s in specs if s.adapter]
        kwargs = dict(
            model=base,
            tokenizer=base,
            dtype="auto" if dtype == "auto" else dtype,
            seed=seed,
            tensor_parallel_size=int(options.get("tensor_parallel_size", 1)),
            gpu_memory_utilization=float(options.get("gpu_memory_utilization", 0.85)),
            enable_prefix_caching=bool(options.get("enable_prefix_caching", True)),
            enforce_eager=bool(options.get("enforce_eager", False)),
        )
        if options.get("max_model_len"):
            kwargs["max_model_len"] = int(options["max_model_len"])
        if adapters:
            kwargs.update(
                enable_lora=True,
                max_loras=max(1, min(len(adapters), int(options.get("max_loras") or len(adapters)))),
                max_lora_rank=vllm_max_lora_rank(adapters),
            )
        log.info("starting vLLM on %s with %d LoRA adapter(s): %s", base, len(adapters), kwargs)
        self.llm = LLM(**kwargs)

    def _lora(self, spec: MemberSpec):
        if spec.adapter is None:
            return None
        from vllm.lora.request import LoRARequest

        if spec.adapter not in self._ids:
            self._ids[spec.adapter] = len(self._ids) + 1  # lora_int_id must be > 0 and unique
        return LoRARequest(spec.name, self._ids[spec.adapter], spec.adapter)

    def bind(self, spec: MemberSpec) -> VLLMMember:
        return VLLMMember(self, spec)

    def generate(self, spec, texts, sampling: SamplingParams, seed: int) -> list[Generation]:
        from vllm import SamplingParams as VSampling

        if not texts:
            return []
        stops = stop_token_ids(self.tok)
        greedy = not (sampling.do_sample and sampling.temperature > 0)
        params = [
            VSampling(
                n=1,
                temperature=0.0 if greedy else sampling.temperature,
                top_p=1.0 if greedy else sampling.top_p,
                top_k=-1 if greedy or not sampling.top_k else sampling.top_k,
                max_tokens=sampling.max_new_tokens,
                stop_token_ids=stops,
                seed=derive_seed(seed, i),
                skip_special_tokens=True,
            )
            for i in range(len(texts))
        ]
        prompts = [{"prompt_token_ids": self.tok(t, add_special_tokens=False)["input_ids"]} for t in texts]
        outs = self.llm.generate(prompts, params, lora_request=self._lora(spec), use_tqdm=True)
        return [
            decode_answer(self.tok, list(o.outputs[0].token_ids), stops, o.outputs[0].finish_reason == "stop")
            for o in outs
        ]

    def continuation_logprobs(self, spec, prompts, conts) -> list[list[float]]:
        """Prompt log-probabilities of prompt + continuation, summed over the continuation."""
        from vllm import SamplingParams as VSampling

        flat = [(i, p + c, len(p)) for i, (p, row) in enumerate(zip(prompts, conts)) for c in row]
        if not flat:
            return [[] for _ in prompts]
        params = VSampling(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outs = self.llm.generate(
            [{"prompt_token_ids": ids} for _, ids, _ in flat],
            params,
            lora_request=self._lora(spec),
            use_tqdm=True,
        )
        result: list[list[float]] = [[] for _ in prompts]
        for (i, ids, start), out in zip(flat, outs):
            lps = out.prompt_logprobs
            result[i].append(sum(lps[k][ids[k]].logprob for k in range(start, len(ids))))
        return result


class VLLMMember:
    """One member (a LoRA request, or the plain base) of a :class:`VLLMEngine`."""

    backend = "vllm"

    def __init__(self, engine: VLLMEngine, spec: MemberSpec):
        self.engine, self.spec, self.tok = engine, spec, engine.tok

    def generate(
        self, texts, sampling: SamplingParams, seed: int, batch_size: int = 8, desc: str = "generate"
    ):
        return self.engine.generate(self.spec, texts, sampling, seed)  # vLLM batches by itself

    def continuation_logprobs(self, prompts, conts, batch_size: int = 8) -> list[list[float]]:
        return self.engine.continuation_logprobs(self.spec, prompts, conts)


class Engines:
    """The engines one job needs, one per base model, created on first use.

    ``backend`` is ``hf`` or ``vllm``; ``specs`` are every member the job will serve (vLLM
    sizes its LoRA slots from them); ``options`` is the config's ``vllm`` section.
    """

    def __init__(
        self, backend: str, device: str, dtype: str, specs=(), options: dict | None = None, seed: int = 0
    ):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: use one of {BACKENDS}")
        self.backend, self.device, self.dtype = backend, device, dtype
        self.specs = list(specs)
        self.options = options or {}
        self.seed = seed
        self._loader = None
        self._vllm: dict[str, VLLMEngine] = {}

    def __call__(self, spec: MemberSpec):
        """``spec`` served: an object with ``tok``, ``generate`` and ``continuation_logprobs``."""
        if self.backend == "hf":
            if self._loader is None:
                self._loader = MemberLoader(self.device, self.dtype)
            loader = self._loader
            return HFModel(None, loader.tokenizer(spec), activate=lambda: loader.load(spec))
        if spec.base not in self._vllm:
            if self._vllm:
                raise ValueError(
                    f"backend vllm serves one base model per job; {spec.name} needs {spec.base} but "
                    f"this job already holds {next(iter(self._vllm))}. Give every member of a pool "
                    "(and evaluation.judge) the same base, or set backend: hf"
                )
            same = [s for s in self.specs if s.base == spec.base] or [spec]
            if spec not in same:
                same.append(spec)
            self._vllm[spec.base] = VLLMEngine(spec.base, same, self.options, self.dtype, self.seed)
        return self._vllm[spec.base].bind(spec)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
