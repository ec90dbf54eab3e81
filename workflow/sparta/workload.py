"""The work a run's config asks for, in tokens (:mod:`sparta.cost` prices it): per stage and
iteration the tokens generated (decoding), read (prompt tokens: prefill, and the expected-mode
judge's scoring) and trained on (DPO).

Counts follow the methods (:mod:`sparta.methods`). Sparta: two answers per duel, each judged by
every member not in the duel, every member trains on every pair. A baseline: every member
answers every prompt ``samples`` times and judges (or annotates) its own answers, and trains on
its own pairs. Each count is the most the config allows: every duel (or prompt) makes a pair,
every answer and judgment runs to its ``max_new_tokens`` (times ``--fill``). Lengths the config
does not bound are estimates: a prompt at about 4 characters a token, measured from the prompt
file where it is on disk, else assumed. Pure: no model, no tokenizer.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import methods
from .data import PromptFileError, read_prompt_file, split_sizes
from .evaluate import REFERENCE_JUDGE_PROMPT
from .judging import JUDGE_PROMPT, META_PROMPT, PAIRWISE_PROMPT, RUBRICS
from .methods.meta_rewarding import max_judge_pairs
from .settings import Settings, TaskSpec

CHARS_PER_TOKEN = 4
"""Characters per token of English text in common BPE vocabularies: an estimate."""
CHAT_TEMPLATE_TOKENS = 12
"""The chat template's own tokens around a request (role markers, turn ends): an assumption."""
DEFAULT_PROMPT_TOKENS = 64
"""Tokens of a prompt whose file is not on disk (``--prompt-tokens``): an assumption."""
DEFAULT_SPLIT_EXAMPLES = 500
"""Examples of an evaluation split whose size cannot be read from disk: an assumption."""
MC_OPTIONS = 5
"""Options a truthfulqa_mc question scores (each read after the question): an assumption."""
DATAMARK_FACTOR = 2
"""How much longer an answer is with ``judge.datamark`` (a marker token per space): an estimate."""
DATASET_ROWS: dict[tuple[str, str | None, str], int] = {
    ("openai/gsm8k", "main", "train"): 7473,
    ("openai/gsm8k", "main", "test"): 1319,
}
"""Rows of hub datasets' splits, from their dataset cards, for when the split is not on disk."""


@dataclass(frozen=True)
class Tokens:
    """Tokens of some work: generated (decoded), read (prompt tokens) and trained (DPO)."""

    generated: int = 0
    read: int = 0
    trained: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.generated + other.generated, self.read + other.read, self.trained + other.trained)


def tokens_of(chars: float) -> int:
    """Tokens of ``chars`` characters of text (an estimate: :data:`CHARS_PER_TOKEN`)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


@functools.cache
def templates() -> dict[str, int]:
    """Tokens of each judge prompt's own text (without the prompt and answers filled in)."""
    text = {name: (r.template or JUDGE_PROMPT).format(prompt="", response="") for name, r in RUBRICS.items()}
    text["pairwise"] = PAIRWISE_PROMPT.format(prompt="", a="", b="")
    text["meta"] = META_PROMPT.format(user="", a="", b="")
    text["reference"] = REFERENCE_JUDGE_PROMPT.format(prompt="", reference="", response="")
    return {name: tokens_of(len(t)) for name, t in text.items()}


@dataclass(frozen=True)
class Assumptions:
    """What the config does not say, as ``python -m sparta.cost`` takes it."""

    fill: float = 1.0
    """Share of max_new_tokens an answer or judgment runs to (1: the upper bound)."""
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    """Tokens of a prompt whose file is not on disk."""
    size: str | None = None
    """The model size class (a row of :data:`sparta.cost.RATES`); None: from the base models' names."""
    device: str = "H100"
    """The device whose throughputs are used where the table has them."""
    root: Path = Path(".")
    """The folder relative paths of the config are read from (the repository root)."""


@dataclass(frozen=True)
class Lengths:
    """Token lengths of one run's requests, and where each estimate came from."""

    instruction: int
    overhead: int
    answer: int
    judgment: int
    prompts: int | None
    notes: tuple[str, ...] = ()


@functools.cache
def _file_prompts(path: str, column: str, where: str, template: str | None) -> tuple[int, float] | None:
    try:
        df = read_prompt_file(path, column, where=json.loads(where) or None, template=template)
    except (PromptFileError, OSError, ValueError, KeyError):
        return None
    texts = df["prompt"].astype(str).drop_duplicates()
    return len(texts), float(texts.str.len().mean())


def file_prompts(file: str | None, column: str, where, template, root: Path) -> tuple[int, float] | None:
    """(distinct prompts, mean characters) of a prompt file on disk; None where it is not."""
    if not file:
        return None
    path = Path(file) if Path(file).is_absolute() else Path(root) / file
    if not path.is_file():
        return None
    return _file_prompts(str(path), column, json.dumps(where or {}, sort_keys=True), template)


def card_rows(dataset: str | None, config: str | None, split: str, where) -> int | None:
    """Rows of a hub dataset's split by :data:`DATASET_ROWS` (None: not listed, or filtered)."""
    if dataset is None or where:
        return None
    return DATASET_ROWS.get((re.sub(r"^hf://(datasets/)?|@.*$", "", dataset), config, split))


def lengths(s: Settings, a: Assumptions) -> Lengths:
    """The token lengths of a run's requests from its settings and the prompt file."""
    p = s.prompts
    found = file_prompts(p.source_file(), p.prompt_column, p.where, p.prompt_template, a.root)
    if found:
        rows, chars = found
        instruction = tokens_of(chars)
        note = (
            f"prompts: {rows:,} distinct in {p.source_file()}, {chars:.0f} characters on average "
            f"(about {instruction} tokens)"
        )
    else:
        rows, instruction = card_rows(p.dataset, p.config, p.split, p.where), a.prompt_tokens
        known = f" ({rows:,} rows by its dataset card)" if rows else ""
        where = p.source_file() or p.dataset
        note = f"prompts: {where} not on disk{known}; {a.prompt_tokens} tokens each assumed"
    return Lengths(
        instruction=instruction,
        overhead=tokens_of(len(s.system_prompt or "")) + CHAT_TEMPLATE_TOKENS,
        answer=max(1, round(s.generation.max_new_tokens * a.fill)),
        judgment=max(1, round(s.judge.max_new_tokens * a.fill)),
        prompts=rows,
        notes=(note,),
    )


def prompts_per_iteration(s: Settings, n: Lengths) -> int:
    """Duels (prompts) of an iteration: prompts.per_iteration, at most the alignment split."""
    if n.prompts is None:
        return s.prompts.per_iteration
    alignment, _, _ = split_sizes(n.prompts, s.prompts.validation, s.prompts.test)
    return min(s.prompts.per_iteration, alignment)


def _answers(count: int, n: Lengths) -> Tokens:
    return Tokens(generated=count * n.answer, read=count * (n.overhead + n.instruction))


def combat(s: Settings, n: Lengths, p: int) -> Tokens:
    """Sparta's combat: the two combatants of every duel answer once."""
    return _answers(2 * p, n)


def sampling(s: Settings, n: Lengths, p: int) -> Tokens:
    """A baseline's answers: every member answers every prompt ``samples`` times."""
    return _answers(len(s.members) * p * methods.get(s.method).samples(s.baselines.samples), n)


def judge_read(s: Settings, n: Lengths, template: str, answers: int = 1) -> int:
    """Prompt tokens of one judge request showing ``answers`` answers, within judge.max_length."""
    shown = n.answer * (DATAMARK_FACTOR if s.judge.datamark else 1)
    return min(s.judge.max_length, n.overhead + templates()[template] + n.instruction + answers * shown)


SCORED_PREFIXES = {"sparta": 10, "pairwise": 2, "additive": 0, "meta": 2}
"""Requests beyond the prompt's that vLLM's expected-mode scoring makes per judgment: one per
candidate prefix (pointwise 1-10: the prompt followed by each of 1 to 9, and by 1 0; pairwise, meta:
A and B; additive 0-5: none), with SmolLM2's tokenizer (a digit, a letter, ``"}`` a token)."""
VLLM_BLOCK = 16
"""vLLM's KV-cache block on a GPU, in tokens: a prefix request reads its prompt's full blocks
from the prefix cache and computes the rest (the CPU build's block: 128)."""


def vllm_scoring(read: int, prefixes: int, block: int = VLLM_BLOCK) -> int:
    """Prompt tokens vLLM computes for an expected-mode judgment whose prompt is ``read`` tokens,
    with ``prefixes`` candidate-prefix requests: each recomputes the prompt's last partial
    ``block`` and its own token (the prompt's full blocks come from the prefix cache)."""
    return read + prefixes * (read % block + 1)


def scored_read(s: Settings, read: int, template: str) -> int:
    """Prompt tokens computed for one expected-mode judgment of ``read`` tokens on s's backend."""
    if s.backend != "vllm" or s.judge.mode != "expected":
        return read
    return vllm_scoring(read, SCORED_PREFIXES[template])


def _judged(s: Settings, n: Lengths, requests: int, read: int, generate: bool, template: str = "") -> Tokens:
    if s.judge.kind == "reference":  # answers checked against the prompt's answer: no model
        return Tokens()
    read = read if generate else scored_read(s, read, template)
    return Tokens(generated=requests * n.judgment if generate else 0, read=requests * read)


def cross_judging(s: Settings, n: Lengths, p: int) -> Tokens:
    """Every member not in a duel judges it: two requests (pointwise: each answer; pairwise:
    both answers in both orders), reading; in generate mode each also writes a judgment."""
    pairwise = s.judge.format == "pairwise"
    template = "pairwise" if pairwise else "sparta"
    read = judge_read(s, n, template, 2 if pairwise else 1)
    return _judged(s, n, p * (len(s.members) - 2) * 2, read, s.judge.mode == "generate", template)


def self_judging(s: Settings, n: Lengths, p: int) -> Tokens:
    """Every member judges each of its answers, ``judge_samples`` times in generate mode."""
    generate = s.judge.mode == "generate"
    each = s.baselines.judge_samples if generate else 1
    answers = len(s.members) * p * methods.get(s.method).samples(s.baselines.samples)
    read = judge_read(s, n, s.baselines.judge_prompt)
    return _judged(s, n, answers * each, read, generate, s.baselines.judge_prompt)


def meta_judging(s: Settings, n: Lengths, p: int) -> Tokens:
    """Meta-rewarding, at most one answer per member and prompt re-judged: its N judgments
    (sampled anew unless generate mode's judge_samples >= N), then every two compared in both
    orders by the member (expected mode: N (N - 1) requests reading the judge's message and two
    judgments)."""
    if s.judge.kind == "reference":
        return Tokens()
    rejudged, k = len(s.members) * p, s.baselines.meta_judgments
    user = judge_read(s, n, s.baselines.judge_prompt) - n.overhead
    reuse = s.judge.mode == "generate" and s.baselines.judge_samples >= k
    sampled = Tokens() if reuse else _judged(s, n, rejudged * k, user + n.overhead, True)
    compare = scored_read(s, n.overhead + templates()["meta"] + user + 2 * n.judgment, "meta")
    return sampled + Tokens(read=rejudged * k * (k - 1) * compare)


def annotation(s: Settings, n: Lengths, p: int) -> Tokens:
    """SPPO: every two of a member's K answers to a prompt compared pairwise in both orders
    (K (K - 1) requests, expected mode: nothing generated)."""
    k = methods.get(s.method).samples(s.baselines.samples)
    read = judge_read(s, n, "pairwise", 2)
    return _judged(s, n, len(s.members) * p * k * (k - 1), read, False, "pairwise")


StageFn = Callable[[Settings, Lengths, int], Tokens]
GENERATING: dict[str, tuple[tuple[str, StageFn], ...]] = {
    "sparta": (("combat generation", combat), ("cross-judging", cross_judging)),
    "self_rewarding": (("sampling", sampling), ("self-judging", self_judging)),
    "meta_rewarding": (
        ("sampling", sampling),
        ("self-judging", self_judging),
        ("meta-judging", meta_judging),
    ),
    "spin": (("sampling", sampling),),
    "sppo": (("sampling", sampling), ("pairwise annotation", annotation)),
}
"""Each method's stages before aggregation: what it generates and how it judges."""
JUDGE_PAIRS = ("meta_rewarding",)
"""Methods that also train on judge pairs (a judgment chosen over another)."""


def dpo(s: Settings, n: Lengths, p: int, t: int) -> Tokens:
    """DPO at the end of iteration ``t``: chosen and rejected sequences (prompt + answer,
    within dpo.max_length) of at most one pair per duel, which every member trains on
    (Sparta), or per member and prompt of each iteration trained on (a baseline), times
    dpo.epochs; meta-rewarding adds its judge pairs under baselines.judge_pair_share."""
    method = methods.get(s.method)
    m = len(s.members)
    sequence = min(s.dpo.max_length, n.overhead + n.instruction + n.answer)
    pairs = m * p * len(method.trained_iterations(t, s.baselines))
    tokens = pairs * 2 * sequence
    if s.method in JUDGE_PAIRS:
        most = max_judge_pairs(p, s.baselines.judge_pair_share)
        judge = p if most is None else min(p, most)
        user = judge_read(s, n, s.baselines.judge_prompt)
        tokens += m * judge * 2 * min(s.dpo.max_length, user + n.judgment)
    return Tokens(trained=round(tokens * s.dpo.epochs))


@dataclass(frozen=True)
class TaskSize:
    """An evaluation task's examples per split and its prompts' tokens."""

    name: str
    validation: int
    test: int
    prompt: int
    note: str


def task_size(task: TaskSpec, s: Settings, n: Lengths, a: Assumptions) -> TaskSize:
    """Examples of the task's validation and test splits (the run's own splits, or a file's
    halves; at most max_examples) and its prompt tokens, read from disk where the data is."""
    if task.source == "prompts":
        rows, prompt = n.prompts, n.instruction
        if rows is not None:
            _, val, test = split_sizes(rows, s.prompts.validation, s.prompts.test)
        note = "the run's own prompt splits"
    else:
        found = file_prompts(task.source_file(), task.prompt_column, task.where, task.prompt_template, a.root)
        prompt = tokens_of(found[1]) if found else a.prompt_tokens
        rows = found[0] if found else card_rows(task.dataset, task.config, task.split, task.where)
        if rows is not None:
            val, test = rows // 2, rows - rows // 2
        where = "measured from its file" if found else f"{a.prompt_tokens} prompt tokens assumed"
        note = f"{rows:,} rows ({'on disk' if found else 'dataset card'}), {where}" if rows else where
    if rows is None:
        val = test = DEFAULT_SPLIT_EXAMPLES
        note += f"; {DEFAULT_SPLIT_EXAMPLES} examples per split assumed"
    if task.max_examples:
        val, test = min(val, task.max_examples), min(test, task.max_examples)
    return TaskSize(task.name, val, test, prompt, note)


def evaluation(s: Settings, n: Lengths, tasks: Sequence[TaskSize], a: Assumptions) -> Tokens:
    """One checkpoint's evaluation: every member on every task's validation split, and on
    test every member (evaluation.test all) or the checkpoint's best (selected)."""
    total = Tokens()
    m = len(s.members)
    for spec, size in zip(s.evaluation.tasks, tasks):
        answers = m * size.validation + (1 if s.evaluation.test == "selected" else m) * size.test
        read = size.prompt + (n.overhead if spec.chat_template else 0)
        if spec.metric == "truthfulqa_mc":  # each option's log-likelihood: read, nothing generated
            total += Tokens(read=answers * MC_OPTIONS * read)
            continue
        made = max(1, round(spec.max_new_tokens * a.fill))
        total += Tokens(generated=answers * made, read=answers * read)
        if spec.metric == "judge_score":  # the judge reads prompt, reference and answer
            total += Tokens(read=answers * (n.overhead + templates()["reference"] + size.prompt + 2 * made))
    return total


def evaluated(s: Settings) -> list[int]:
    """The checkpoints evaluated: 0 (the initial pool) to the last, or 0 and the last."""
    if not s.evaluation.enabled or not s.evaluation.tasks:
        return []
    return list(range(s.iterations + 1)) if s.evaluation.checkpoints == "all" else [0, s.iterations]
