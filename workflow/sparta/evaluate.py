"""Evaluation of a served member on a task (tasks load in tasks.py, metrics live in
metrics.py). The member is any backend's (:mod:`sparta.backends`); nothing here imports
torch.

Metrics: ``exact_match`` (generate, extract the number or the last \\boxed{}),
``multiple_choice`` (generate, extract the letter), ``truthfulqa_mc`` (MC1/MC2 from the
log-likelihood of each option, no generation), ``judge_score`` (a judge model scores the
answer 0-10 against a reference, by the same expected-score method as cross-judging).
"""

from __future__ import annotations

import logging
import string

import pandas as pd

from . import metrics
from .chat import chat_text
from .judging import expected_scores
from .settings import Sampling
from .tasks import Task, TaskError, parse_list

log = logging.getLogger(__name__)

REFERENCE_JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the response to the instruction below, "
    "comparing it with the reference answer. Rate it on a scale of 0 to 10, where 0 is "
    "completely wrong and 10 is as good as the reference.\n\n[Instruction]\n{prompt}\n\n"
    "[Reference answer]\n{reference}\n\n[Response]\n{response}\n[End of response]\n\n"
    'Output only a JSON object of the form {{"score": N}}, where N is an integer from 0 to 10.'
)


def mc_prompt(question: str, options: list[str]) -> str:
    letters = string.ascii_uppercase
    lines = [question, ""] + [f"{letters[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join(lines) + "\n\nAnswer with the letter of the correct option."


def _prompt_text(tok, task: Task, prompt: str, system: str | None) -> str:
    return chat_text(tok, prompt, system) if task.chat_template else prompt


def option_logprobs(member, context: str, options: list[str], batch_size: int = 8) -> list[float]:
    """Summed log-probability of each option's tokens after ``context``.

    Each option is tokenized together with the context; the scored tokens start where the
    two tokenizations part (so a merge across the boundary is scored, not lost)."""
    tok = member.tok
    ctx = tok(context, add_special_tokens=False)["input_ids"]
    prompts, conts = [], []
    for option in options:
        full = tok(context + option, add_special_tokens=False)["input_ids"]
        common = 0
        while common < min(len(ctx), len(full)) and ctx[common] == full[common]:
            common += 1
        common = max(common, 1)
        prompts.append(full[:common])
        conts.append([full[common:]])
    return [row[0] for row in member.continuation_logprobs(prompts, conts, batch_size)]


def evaluate_task(member, task: Task, system: str | None, batch_size: int, judge=None) -> pd.DataFrame:
    """One row per (split, example): prediction and score (1/0, MC2 mass, or 0-10).

    ``member`` and ``judge`` are served members (:mod:`sparta.backends`), of any backend."""
    tok = member.tok
    frames = []
    greedy = Sampling.greedy_decoding(task.max_new_tokens)
    for split, df in task.rows.items():
        if task.metric == "truthfulqa_mc":
            scores, preds, extra = [], [], []
            for r in df.itertuples(index=False):
                options, labels = parse_list(r.options), [int(x) for x in parse_list(r.labels)]
                lps = option_logprobs(member, _prompt_text(tok, task, r.prompt, system), options, batch_size)
                mc1, mc2 = metrics.mc1_mc2(lps, labels)
                scores.append(mc2)
                extra.append(mc1)
                preds.append(options[max(range(len(lps)), key=lambda i: lps[i])])
            frames.append(
                pd.DataFrame(
                    {
                        "split": split,
                        "example_id": df["example_id"],
                        "prediction": preds,
                        "score": scores,
                        "mc1": extra,
                    }
                )
            )
            continue
        prompts = df["prompt"].tolist()
        if task.metric == "multiple_choice" and "options" in df:
            prompts = [mc_prompt(p, parse_list(o)) for p, o in zip(prompts, df["options"])]
        texts = [_prompt_text(tok, task, p, system) for p in prompts]
        outs = member.generate(texts, greedy, 0, batch_size, desc=f"eval {task.name} {split}")
        preds = [o.text for o in outs]
        if task.metric == "exact_match":
            scores = [float(metrics.exact_match(p, a, task.answer)) for p, a in zip(preds, df["answer"])]
        elif task.metric == "multiple_choice":
            n = [len(parse_list(o)) for o in df["options"]] if "options" in df else [5] * len(df)
            scores = [
                float(metrics.extract_choice(p, k) == str(a).strip().upper()[:1])
                for p, a, k in zip(preds, df["answer"], n)
            ]
        else:  # judge_score
            if judge is None:
                raise TaskError(f"task {task.name}: metric judge_score needs evaluation.judge")
            refs = df["reference"] if "reference" in df else df["answer"]
            user = [
                REFERENCE_JUDGE_PROMPT.format(prompt=p, reference=r, response=y)
                for p, r, y in zip(df["prompt"], refs, preds)
            ]
            scores = [j.score for j in expected_scores(judge, user, range(0, 11), system, batch_size)]
        frames.append(
            pd.DataFrame(
                {
                    "split": split,
                    "example_id": df["example_id"].to_numpy(),
                    "prediction": preds,
                    "score": scores,
                }
            )
        )
    result = pd.concat(frames, ignore_index=True)
    result.insert(0, "task", task.name)
    result.insert(1, "metric", task.metric)
    return result
