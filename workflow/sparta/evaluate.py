"""Evaluation of a served member on a task (tasks load in tasks.py, metrics live in
metrics.py), one scorer per metric (:data:`SCORERS`: a new metric is one more scorer). The
member is any backend's (:mod:`sparta.backends`); nothing here imports torch.
"""

from __future__ import annotations

import logging
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import hub, metrics, pool
from .backends import Served
from .chat import chat_ids
from .judging import expected_scores
from .settings import Sampling
from .tasks import Task, TaskError, load_task

log = logging.getLogger(__name__)

REFERENCE_JUDGE_PROMPT = (
    "Please act as an impartial judge and evaluate the response to the instruction below, "
    "comparing it with the reference answer. Rate it on a scale of 0 to 10, where 0 is "
    "completely wrong and 10 is as good as the reference.\n\n[Instruction]\n{prompt}\n\n"
    "[Reference answer]\n{reference}\n\n[Response]\n{response}\n[End of response]\n\n"
    'Output only a JSON object of the form {{"score": N}}, where N is an integer from 0 to 10.'
)


def mc_prompt(question: str, options: list[str]) -> str:
    lines = [question, ""] + [f"{string.ascii_uppercase[i]}. {o}" for i, o in enumerate(options)]
    return "\n".join(lines) + "\n\nAnswer with the letter of the correct option."


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


@dataclass
class Evaluation:
    """One task's evaluation of some members: what every scorer needs.

    ``serve(names)`` gives a served object (:class:`sparta.backends.Served`) answering request
    i as member ``names[i]``, so all members' requests run in the same batches. ``judge`` is a
    served judge model for judge_score tasks."""

    serve: Callable[[list[str]], Served]
    members: list[str]
    task: Task
    system: str | None
    batch_size: int
    judge: Served | None = None
    tok: Any = field(init=False)  # the members' tokenizer

    def __post_init__(self):
        self.tok = self.serve(self.members[:1]).tok

    def prompt_ids(self, prompt: str, answer_start: str = "") -> list[int]:
        """A task prompt's ids, with the first words of the answer given: through the chat
        template (its contents as plain text), or the prompt alone as plain text."""
        if self.task.chat_template:
            return chat_ids(self.tok, prompt, self.system, answer_start)
        text = prompt + answer_start
        return self.tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def answers(self, split: str, prompts: list[str]) -> list[list[str]]:
        """Each member's greedy answer to every prompt, all members in the same batches."""
        n = len(prompts)
        who = [m for m in self.members for _ in range(n)]  # request order: member, then example
        ids = [self.prompt_ids(p) for p in prompts]
        greedy = Sampling.greedy_decoding(self.task.max_new_tokens)
        desc = f"eval {self.task.name} {split}"
        outs = self.serve(who).generate(
            ids * len(self.members), greedy, [0] * len(who), self.batch_size, desc
        )
        return [[o.text for o in outs[j * n : (j + 1) * n]] for j in range(len(self.members))]


Columns = dict[str, list]
"""A member's columns on one split: prediction, score and any the metric adds (one per example)."""
Scorer = Callable[[Evaluation, str], list[Columns]]
"""The columns of every member (in ``Evaluation.members`` order) on one split of the task."""

SCORERS: dict[str, Scorer] = {}
"""metric name -> its scorer: the metrics a task may name."""


def scorer(metric: str) -> Callable[[Scorer], Scorer]:
    def register(fn: Scorer) -> Scorer:
        SCORERS[metric] = fn
        return fn

    return register


@scorer("exact_match")
def exact_match(ev: Evaluation, split: str) -> list[Columns]:
    df = ev.task.rows[split]
    return [
        {
            "prediction": preds,
            "score": [float(metrics.exact_match(p, a, ev.task.answer)) for p, a in zip(preds, df["answer"])],
        }
        for preds in ev.answers(split, df["prompt"].tolist())
    ]


@scorer("multiple_choice")
def multiple_choice(ev: Evaluation, split: str) -> list[Columns]:
    """The options (when the task has them) are listed under the question, lettered; without
    them the letter is read among A-E."""
    df, options = ev.task.rows[split], ev.task.options.get(split)
    prompts = df["prompt"].tolist()
    if options is not None:
        prompts = [mc_prompt(p, o) for p, o in zip(prompts, options)]
    k = [len(o) for o in options] if options is not None else [5] * len(df)
    return [
        {
            "prediction": preds,
            "score": [
                float(metrics.extract_choice(p, c) == str(a).strip().upper()[:1])
                for p, a, c in zip(preds, df["answer"], k)
            ],
        }
        for preds in ev.answers(split, prompts)
    ]


@scorer("truthfulqa_mc")
def truthfulqa_mc(ev: Evaluation, split: str) -> list[Columns]:
    """MC1/MC2 from each option's log-likelihood after the prompt: no generation. The
    prediction is the likeliest option."""
    task = ev.task
    if split not in task.options or split not in task.labels:
        raise TaskError(f"task {task.name}: metric truthfulqa_mc needs options_column and labels_column")
    df, options, labels = task.rows[split], task.options[split], task.labels[split]
    prompts, conts, owner = [], [], []
    for m in ev.members:
        for q, opts in zip(df["prompt"], options):
            p, c = option_requests(lambda x, q=q: ev.prompt_ids(q, x), opts)
            prompts += p
            conts += c
            owner += [m] * len(p)
    scored = ev.serve(owner).continuation_logprobs(prompts, conts, ev.batch_size)
    flat = iter(row[0] for row in scored)
    out = []
    for _ in ev.members:
        preds, scores, mc1s = [], [], []
        for opts, labs in zip(options, labels):
            lps = [next(flat) for _ in opts]
            mc1, mc2 = metrics.mc1_mc2(lps, labs)
            preds.append(opts[max(range(len(lps)), key=lambda i: lps[i])])
            scores.append(mc2)
            mc1s.append(mc1)
        out.append({"prediction": preds, "score": scores, "mc1": mc1s})
    return out


@scorer("judge_score")
def judge_score(ev: Evaluation, split: str) -> list[Columns]:
    """The judge scores each answer 0-10 against the reference (or the answer column)."""
    df, judge = ev.task.rows[split], ev.judge
    if judge is None:
        raise TaskError(f"task {ev.task.name}: metric judge_score needs evaluation.judge")
    refs = df["reference"] if "reference" in df else df["answer"]
    out = []
    for preds in ev.answers(split, df["prompt"].tolist()):
        user = [
            REFERENCE_JUDGE_PROMPT.format(prompt=p, reference=r, response=y)
            for p, r, y in zip(df["prompt"], refs, preds)
        ]
        scores = [j.score for j in expected_scores(judge, user, range(0, 11), ev.system, ev.batch_size)]
        out.append({"prediction": preds, "score": scores})
    return out


def evaluate_members(
    serve: Callable[[list[str]], Served],
    members: list[str],
    task: Task,
    system: str | None,
    batch_size: int,
    *,
    judge: Served | None = None,
    splits: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """Every member on every example of a task (of ``splits`` only, when given): one row per
    (member, split, example) with prediction and score, by the task's metric's scorer."""
    ev = Evaluation(serve, members, task, system, batch_size, judge)
    score = SCORERS[task.metric]
    frames = []
    for split, df in task.rows.items():
        if splits is not None and split not in splits:
            continue
        for m, columns in zip(members, score(ev, split), strict=True):
            ids = df["example_id"].to_numpy()
            frames.append(pd.DataFrame({"member": m, "split": split, "example_id": ids, **columns}))
    if not frames:
        return pd.DataFrame(
            columns=["task", "metric", "member", "split", "example_id", "prediction", "score"]
        )
    result = pd.concat(frames, ignore_index=True)
    result.insert(0, "task", task.name)
    result.insert(1, "metric", task.metric)
    return result


def best_on_validation(rows: pd.DataFrame) -> str | None:
    """The member with the best mean validation score in one task's evaluation rows (ties: the
    first by name), as a run's selection ranks them; None without validation rows."""
    val = rows[rows["split"] == "validation"]
    if len(val) == 0:
        return None
    means = val.groupby("member")["score"].mean()
    return sorted(means.index, key=lambda m: (-means[m], m))[0]


def evaluate_checkpoint(
    serve: Callable[[list[str]], Served],
    groups: list[list[str]],
    task: Task,
    system: str | None,
    batch_size: int,
    *,
    judge: Served | None = None,
    test: str = "all",
) -> pd.DataFrame:
    """One checkpoint's members (``groups``: their names, one list per base model, served in the
    same batches) on a task. ``test`` all: every member on every split; selected: every member on
    validation, then only the best of them (:func:`best_on_validation`, the only one a selection
    can pick) on test. A task without validation rows is tested on every member."""
    if test not in ("all", "selected"):
        raise ValueError(f"evaluation.test must be all or selected, not {test!r}")
    args = (task, system, batch_size)
    if test == "all" or len(task.rows.get("validation", ())) == 0:
        return pd.concat([evaluate_members(serve, g, *args, judge=judge) for g in groups], ignore_index=True)
    others = tuple(s for s in task.rows if s != "test")
    frames = [evaluate_members(serve, g, *args, judge=judge, splits=others) for g in groups]
    best = best_on_validation(pd.concat(frames, ignore_index=True))
    if "test" in task.rows and best is not None:
        log.info("%s: test for %s only, the best on validation (evaluation.test: selected)", task.name, best)
        frames.append(evaluate_members(serve, [best], *args, judge=judge, splits=("test",)))
    return pd.concat(frames, ignore_index=True)


# --- the config check ----------------------------------------------------------------------------


def problems(settings, root: Path, notes: list[str]) -> list[str]:
    """The evaluation's tasks and its judge model, and selection settings that contradict the
    checkpoints evaluated or the fan-out (evaluation on)."""
    ev = settings.evaluation
    if not ev.enabled:
        return []
    found = []
    if ev.select_from == "all" and ev.checkpoints != "all":
        found.append(
            "evaluation.select_from: all selects among every checkpoint, but evaluation.checkpoints is "
            f"{ev.checkpoints}: set evaluation.checkpoints: all (or evaluation.select_from: final)"
        )
    if ev.test == "selected" and settings.fanout != "pool":
        found.append(
            "evaluation.test: selected picks each checkpoint's best member on validation inside its "
            f"evaluation job, but fanout is {settings.fanout} (a job per member): set fanout: pool "
            "(or evaluation.test: all)"
        )
    if not ev.tasks:
        return [
            "evaluation.tasks is empty ([]) while evaluation.enabled is true: every checkpoint would be "
            "evaluated on nothing; add a task (docs: Your own pool, Evaluation) or set "
            "evaluation.enabled: false",
            *found,
        ]
    if ev.judge is not None:
        found += pool.empty_problems("evaluation.judge", {"adapter": ev.judge.adapter})
    for task in ev.tasks:
        found += _task_problems(task, settings, root)
    if ev.judge is not None:
        found += pool.judge_model_problems(root, ev.judge, "evaluation.judge", notes, settings.backend)
    return found


def _task_problems(task, settings, root: Path) -> list[str]:
    name = f"evaluation.tasks ({task.name})"
    if task.metric == "judge_score" and settings.evaluation.judge is None:
        return [f"{name}: metric judge_score needs evaluation.judge (a judge model folder)"]
    if task.source == "prompts":
        if task.metric in ("exact_match", "multiple_choice") and not settings.prompts.answer_column:
            return [f"{name}: metric {task.metric} on source prompts needs prompts.answer_column"]
        if task.metric == "truthfulqa_mc":
            return [f"{name}: truthfulqa_mc needs a file task with options and labels"]
        return []
    if not task.file and not task.dataset:
        return [f"{name}: give file or dataset (or source: prompts)"]
    found = hub.source_problems(task, name, root, None)
    if found is not None:
        return found
    try:
        load_task(task, {}, 0, root)
    except TaskError as e:
        return [str(e)]
    return []
