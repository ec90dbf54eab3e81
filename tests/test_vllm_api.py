"""The vLLM calls the backend makes, against the real vLLM package of envs/vllm.yaml, on a CPU:
the engine's arguments, the sampling and scoring parameters, LoRA requests, reading prompt
log-probabilities from a real ``RequestOutput``, and which adapters vLLM's own LoRA reader
refuses (compared with sparta's check). No engine starts (that needs a GPU: tests/test_vllm.py).

vLLM is a GPU-only extra of several GB and is not installed in CI: these skip there. Run them
with ``make vllm-check``, which installs envs/vllm.yaml's pins in a scratch environment (about
8 GB, most of it CUDA libraries) and runs this file and the model tests with them.
"""

import dataclasses
import inspect
import json

import numpy as np
import pytest

from sparta.members import MemberSpec
from sparta.settings import Sampling, VLLMSettings

vllm = pytest.importorskip("vllm", reason="vLLM is not installed (make vllm-check installs envs/vllm.yaml)")

from sparta.backends import vllm as backend  # noqa: E402
from sparta.modelfiles import VLLM_LORA_RANKS, VLLM_MAX_LORA_RANK, vllm_lora_problems  # noqa: E402


def test_the_pinned_vllm_is_the_one_installed():
    import yaml

    from .workflow_helpers import REPO

    env = yaml.safe_load((REPO / "envs" / "vllm.yaml").read_text())
    pins = dict(p.split("==") for d in env["dependencies"] if isinstance(d, dict) for p in d["pip"])
    assert vllm.__version__ == pins["vllm"]


def test_engine_arguments_are_vllm_s(tmp_path):
    from vllm.config.lora import MaxLoRARanks
    from vllm.engine.arg_utils import EngineArgs

    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(
        json.dumps({"r": 12, "lora_alpha": 16, "target_modules": ["q_proj"]})
    )
    adapters = [MemberSpec("a", "base", str(folder))]
    options = VLLMSettings(max_model_len=4096, max_loras=4)
    from .tiny import build_tiny_model

    base = str(build_tiny_model(tmp_path / "base"))
    kwargs = backend.engine_kwargs(base, adapters, options, "bfloat16", 7)
    fields = {f.name for f in dataclasses.fields(EngineArgs)}
    assert set(kwargs) <= fields, set(kwargs) - fields
    assert set(inspect.signature(vllm.LLM.__init__).parameters) >= {"model", "tokenizer", "seed", "dtype"}
    args = EngineArgs(**kwargs)  # builds no engine
    assert (args.max_lora_rank, args.max_loras, args.enable_lora) == (16, 1, True)
    assert tuple(MaxLoRARanks.__args__) == VLLM_LORA_RANKS and VLLM_LORA_RANKS[-1] == VLLM_MAX_LORA_RANK


def test_sampling_and_scoring_parameters():
    sampled = backend.sampling_params(
        Sampling(temperature=0.7, top_p=0.9, top_k=50, max_new_tokens=32), 11, [2]
    )
    assert (sampled.seed, sampled.temperature, sampled.top_k, sampled.max_tokens) == (11, 0.7, 50, 32)
    assert sampled.stop_token_ids == [2] and sampled.detokenize is False
    greedy = backend.sampling_params(Sampling(temperature=0.0, max_new_tokens=8), 3, [2])
    assert greedy.temperature == 0.0 and greedy.top_k in (-1, 0)
    legacy = backend.scoring_params([5, 9, 7], 1, by_token_ids=False)
    assert legacy.prompt_logprobs == 1 and legacy.max_tokens == 1 and legacy.detokenize is False
    generate = inspect.signature(vllm.LLM.generate).parameters
    assert {"lora_request", "use_tqdm", "sampling_params"} <= set(generate)
    from vllm.inputs import TokensPrompt

    assert "prompt_token_ids" in TokensPrompt.__annotations__


def test_lora_requests_and_prompt_logprobs_read_as_the_backend_reads_them():
    request = backend.lora_request("ann", 1, "/adapters/ann")
    assert (request.lora_name, request.lora_int_id, request.lora_path) == ("ann", 1, "/adapters/ann")
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    ids = [5, 9, 7, 3]
    completion = CompletionOutput(
        index=0, text="", token_ids=[1], cumulative_logprob=None, logprobs=None, finish_reason="length"
    )
    output = RequestOutput(
        request_id="0",
        prompt=None,
        prompt_token_ids=ids,
        # per prompt position: the prompt's own token and the top-1 token, the first none
        prompt_logprobs=[None, {9: Logprob(-0.5)}, {7: Logprob(-1.25), 4: Logprob(-0.2)}, {3: Logprob(-2.0)}],
        outputs=[completion],
        finished=True,
    )
    assert backend.summed_logprob(output, ids, 2) == pytest.approx(-3.25)
    assert backend.summed_logprob(output, ids, 4) == 0.0  # an empty continuation
    assert output.outputs[0].finish_reason == "length" and list(output.outputs[0].token_ids) == [1]


CASES = {
    "fine": {},
    "rank pattern within": {"rank_pattern": {"q_proj": 64}},
    "rank pattern above": {"rank_pattern": {"q_proj": 1024}},
    "rank above": {"r": 1024},
    "modules_to_save": {"modules_to_save": ["lm_head"]},
    "dora": {"use_dora": True},
    "bias": {"bias": "all"},
    "lora bias": {"lora_bias": True},
    "pissa": {"init_lora_weights": "pissa"},
}


@pytest.mark.parametrize("case", CASES)
def test_sparta_refuses_what_vllm_s_lora_reader_refuses(case):
    """vLLM's own reader of adapter_config.json (PEFTHelper, as its LoRA loader runs it) and
    sparta's check before any job agree on each hand-built config."""
    from vllm.config.lora import LoRAConfig
    from vllm.lora.peft_helper import PEFTHelper

    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    config.update(CASES[case])
    try:
        PEFTHelper.from_dict(dict(config)).validate_legal(LoRAConfig(max_lora_rank=VLLM_MAX_LORA_RANK))
        refused = False
    except ValueError:
        refused = True
    assert bool(vllm_lora_problems(config)) == refused, vllm_lora_problems(config)


def test_the_flashinfer_sampler_is_off_when_vllm_reads_its_settings(monkeypatch):
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    backend._import_vllm(VLLMSettings())
    import vllm.envs

    assert vllm.envs.VLLM_USE_FLASHINFER_SAMPLER is False


def _model_config(tmp_path):
    from vllm.config import ModelConfig

    from .tiny import build_tiny_model

    base = str(build_tiny_model(tmp_path / "base"))
    return ModelConfig(model=base, tokenizer=base)


def test_scoring_asks_for_the_continuation_s_tokens_only(tmp_path):
    """On the V2 runner a scoring request names one token per continuation position, from row
    start - 1 (vLLM: row i scores prompt token prompt_logprob_start + i + 1, and a prompt has
    prompt_len - 1 - prompt_logprob_start rows); vLLM's own check of the request accepts it."""
    ids, start = [3, 11, 12, 40, 41, 42], 3
    params = backend.scoring_params(ids, start, by_token_ids=True)
    rows = params.prompt_logprob_token_ids
    assert len(rows) == len(ids) - 1 - params.prompt_logprob_start == len(ids) - start
    assert [ids[params.prompt_logprob_start + i + 1] for i in range(len(rows))] == [int(r[0]) for r in rows]
    assert params.prompt_logprobs is None and params.detokenize is False and params.max_tokens == 1
    assert params.skip_reading_prefix_cache  # vLLM computes every scored row itself
    params.verify(_model_config(tmp_path), None, None, None)


class _ScoringLLM:
    """Answers scoring requests as vLLM's V2 runner does, with made-up numbers: row i of a
    request is the prediction of prompt token prompt_logprob_start + i + 1, scored here as
    minus that token's id over 100 (checked against the token the request names)."""

    def __init__(self):
        self.calls = []

    def generate(self, requests, params, lora_request=None, use_tqdm=True):
        from vllm.outputs import CompletionOutput, RequestOutput

        self.calls.append(len(requests))
        outs = []
        for k, (request, p) in enumerate(zip(requests, params)):
            ids = request["prompt_token_ids"]
            named = [int(r[0]) for r in p.prompt_logprob_token_ids]
            wanted = ids[p.prompt_logprob_start + 1 :]
            assert named == wanted and lora_request[k] is not None
            scores = np.array([[-t / 100] for t in wanted], dtype=np.float32)
            done = CompletionOutput(0, "", [1], None, None, finish_reason="length")
            outs.append(RequestOutput(str(k), None, ids, None, [done], True, prompt_token_id_logprobs=scores))
        return outs


def test_identical_and_empty_continuations_cost_no_request(tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    engine = object.__new__(backend.VLLMEngine)  # no engine starts on a CPU: vLLM's outputs stand in
    engine.llm, engine.v2, engine._ids = _ScoringLLM(), True, {}
    member = MemberSpec("a", "base", str(folder))
    prompts = [[1, 2], [1, 2], [7]]
    conts = [[[30, 40], [], [50]], [[30, 40]], [[60, 70, 80]]]
    got = engine.continuation_logprobs([member] * 3, prompts, conts)
    want = [[-0.7, 0.0, -0.5], [-0.7], [-2.1]]
    assert [len(r) for r in got] == [3, 1, 1]
    assert sum(got, []) == pytest.approx(sum(want, []), abs=1e-6)
    assert engine.llm.calls == [3]  # [1, 2, 30, 40] once, the empty one not at all


def test_the_model_runner_is_read_where_vllm_keeps_it():
    """uses_v2_runner reads LLM.llm_engine.vllm_config.use_v2_model_runner (a property of the
    engine's config, which the V2-only scoring request needs)."""
    from vllm.config import VllmConfig
    from vllm.v1.engine.llm_engine import LLMEngine

    assert isinstance(inspect.getattr_static(VllmConfig, "use_v2_model_runner"), property)
    assert "self.vllm_config = vllm_config" in inspect.getsource(LLMEngine.__init__)
    assert "self.llm_engine = LLMEngine" in inspect.getsource(vllm.LLM.__init__)
