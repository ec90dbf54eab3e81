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
from .chat import chat_ids
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


def _prompt_ids(tok, task: Task, prompt: str, system: str | None, answer_start: str = "") -> list[int]:
    """A task prompt's ids, with the first words of the answer given: through the chat template
    (its contents as plain text), or the prompt alone as plain text."""
    if task.chat_template:
        return chat_ids(tok, prompt, system, answer_start)
    return tok(prompt + answer_start, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def option_requests(ids_with, options: list[str]) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Prompt and continuation ids to score each option's tokens after the prompt.

    ``ids_with(text)`` gives the prompt's ids with ``text`` as the start of the answer: each
    option is tokenized together with the prompt, and the scored tokens start where the two
    tokenizations part (so a merge across the boundary is scored, not lost)."""
    ctx = ids_with("")
    prompts, conts = [], []
    for option in options:
        full = ids_with(option)
        common = 0
        while common < min(len(ctx), len(full)) and ctx[common] == full[common]:
            common += 1
        common = max(common, 1)
        prompts.append(full[:common])
        conts.append([full[common:]])
    return prompts, conts


def option_logprobs(member, context: str, options: list[str], batch_size: int = 8) -> list[float]:
    """Summed log-probability of each option's tokens after the plain text ``context``."""
    tok = member.tok

    def ids_with(text: str) -> list[int]:
        return tok(context + text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    prompts, conts = option_requests(ids_with, options)
    return [row[0] for row in member.continuation_logprobs(prompts, conts, batch_size)]


def evaluate_members(serve, members: list[str], task: Task, system: str | None, batch_size: int, judge=None):
    """Every member on every example of a task: one row per (member, split, example) with
    prediction and score (1/0, MC2 mass, or 0-10).

    ``serve(names)`` gives a served object (:class:`sparta.backends.Served`) answering request
    i as member ``names[i]``, so all members' requests run in the same batches. ``judge`` is a
    served judge model for judge_score tasks."""
    tok = serve(members[:1]).tok
    frames = []
    greedy = Sampling.greedy_decoding(task.max_new_tokens)
    for split, df in task.rows.items():
        n = len(df)
        who = [m for m in members for _ in range(n)]  # request order: member, then example
        if task.metric == "truthfulqa_mc":
            options = [parse_list(o) for o in df["options"]]
            labels = [[int(x) for x in parse_list(v)] for v in df["labels"]]
            prompts, conts, owner = [], [], []
            for m in members:
                for k, r in enumerate(df.itertuples(index=False)):
                    p, c = option_requests(
                        lambda x, q=r.prompt: _prompt_ids(tok, task, q, system, x), options[k]
                    )
                    prompts += p
                    conts += c
                    owner += [m] * len(p)
            flat = iter(row[0] for row in serve(owner).continuation_logprobs(prompts, conts, batch_size))
            for m in members:
                scores, preds, extra = [], [], []
                for opts, labs in zip(options, labels):
                    lps = [next(flat) for _ in opts]
                    mc1, mc2 = metrics.mc1_mc2(lps, labs)
                    scores.append(mc2)
                    extra.append(mc1)
                    preds.append(opts[max(range(len(lps)), key=lambda i: lps[i])])
                frames.append(
                    pd.DataFrame(
                        {
                            "member": m,
                            "split": split,
                            "example_id": df["example_id"].to_numpy(),
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
        ids = [_prompt_ids(tok, task, p, system) for p in prompts]
        outs = serve(who).generate(
            ids * len(members), greedy, [0] * len(who), batch_size, f"eval {task.name} {split}"
        )
        for j, m in enumerate(members):
            preds = [o.text for o in outs[j * n : (j + 1) * n]]
            if task.metric == "exact_match":
                scores = [float(metrics.exact_match(p, a, task.answer)) for p, a in zip(preds, df["answer"])]
            elif task.metric == "multiple_choice":
                k = [len(parse_list(o)) for o in df["options"]] if "options" in df else [5] * n
                scores = [
                    float(metrics.extract_choice(p, c) == str(a).strip().upper()[:1])
                    for p, a, c in zip(preds, df["answer"], k)
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
                        "member": m,
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


def evaluate_task(member, task: Task, system: str | None, batch_size: int, judge=None) -> pd.DataFrame:
    """One served member on a task: one row per (split, example)."""
    out = evaluate_members(lambda names: member, ["member"], task, system, batch_size, judge)
    return out.drop(columns="member")
