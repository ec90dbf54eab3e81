"""What tests (and benchmarks/gpu_check.py) need on a model in hand, on top of the production
interfaces: a model served as a backend's member, one member's evaluation and option
log-likelihoods, DPO of one member."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sparta.backends import Backend, Generation, Served
from sparta.members import MemberSpec
from sparta.settings import DPOSettings, LoraSettings, Runtime, Sampling


class ModelBackend(Backend):
    """One plain Hugging Face model (no adapter switching) and its tokenizer, as a backend:
    every member is that model."""

    def __init__(self, model, tok):
        self.model, self.tok = model, tok

    def tokenizer(self, spec: MemberSpec):
        return self.tok

    def generate(
        self, members, prompts, sampling: Sampling, seeds, *, batch_size=8, desc="generate"
    ) -> list[Generation]:
        from sparta.backends.hf import generate

        return generate(
            self.model, self.tok, prompts, sampling, list(seeds), batch_size=batch_size, desc=desc
        )

    def continuation_logprobs(self, members, prompts, conts, batch_size=8) -> list[list[float]]:
        from sparta.backends.hf import continuation_logprobs

        return continuation_logprobs(self.model, self.tok.pad_token_id, prompts, conts, batch_size=batch_size)


def served_model(model, tok) -> Served:
    """A model in hand and its tokenizer, served as one member."""
    return ModelBackend(model, tok).serve(MemberSpec("model", "in-hand"))


def evaluate_task(member: Served, task, system: str | None, batch_size: int, judge=None) -> pd.DataFrame:
    """One served member on a task: one row per (split, example)."""
    from sparta.evaluate import evaluate_members

    out = evaluate_members(lambda names: member, ["member"], task, system, batch_size, judge=judge)
    return out.drop(columns="member")


def option_logprobs(member: Served, context: str, options: list[str], batch_size: int = 8) -> list[float]:
    """Summed log-probability of each option's tokens after the plain text ``context``."""
    from sparta.evaluate import option_requests

    tok = member.tok

    def ids_with(text: str) -> list[int]:
        return tok(context + text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    prompts, conts = option_requests(ids_with, options)
    return [row[0] for row in member.continuation_logprobs(prompts, conts, batch_size)]


def dpo_member(
    spec: MemberSpec,
    prefs: pd.DataFrame,
    out_dir: str | Path,
    params: DPOSettings,
    lora: LoraSettings,
    runtime: Runtime,
    seed: int,
) -> dict:
    """DPO of one member (see :func:`sparta.train.dpo_members`); ``seed`` is this member's."""
    from sparta.train import dpo_members

    return dpo_members([(spec, Path(out_dir), seed)], prefs, params, lora, runtime)[0]


def judgment_row(duel_id, judge, target, score, **other) -> dict:
    """A row of the judgments table as the tests build them: a pointwise score of ``target``
    by ``judge``, no error, defence or cost; ``other`` sets any other column."""
    return {
        "duel_id": duel_id,
        "judge": judge,
        "target": target,
        "score": score,
        "raw": "",
        "error": None,
        "truncated": False,
        "format": "pointwise",
        "defences": "none",
        "sanitized": False,
        "sample": 0,
        "kind": "score",
        "prompt_tokens": 0,
        "requests": 0,
        "generated_tokens": 0,
        **other,
    }
