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
    scoring = backend.scoring_params()
    assert scoring.prompt_logprobs == 1 and scoring.max_tokens == 1 and scoring.detokenize is False
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
