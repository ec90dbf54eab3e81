"""The cost of a run from its config alone: per stage and iteration, the tokens it generates
(decoding), the tokens it reads (prompt tokens: prefill, and the expected-mode judge's scoring)
and the tokens DPO trains on; then GPU-hours at the throughputs of :data:`RATES`::

    python -m sparta.cost workflow/configs/paper.yaml [more configs ...] [--json]

The configs are read as ``sparta config`` reads them (:func:`read_config`), without the checks
of the world (:func:`sparta.config.load_study`: model folders, downloads): a cost is wanted
before anything is downloaded.

The tokens come from :mod:`sparta.workload`, which says how each method counts them; every
assumption is printed with the figures. Pure: no model, no tokenizer.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import workload
from .config import ConfigError, read_config_files, validate
from .settings import Settings, SettingsError
from .study import expand
from .workload import GENERATING, Assumptions, Tokens


class CostError(ValueError):
    """A config the cost model cannot read; the message says what to fix."""


@dataclass(frozen=True)
class Rate:
    """Tokens per second of one kind of work on one GPU: ``read`` (prompt tokens: prefill and
    scoring), ``decode`` (generated tokens, a batch of rows) or ``train`` (DPO: the tokens of
    chosen and rejected sequences, reference log-probabilities included)."""

    kind: str
    size: str
    backend: str
    device: str
    tokens_per_s: float
    status: str  # measured | assumption
    source: str


RATES_FILE = Path(__file__).with_name("rates.csv")
"""The throughput table, a data file beside this module: each row measured (machine, date and
commit in its source) or assumed; ``docs/guides/paper.md`` prints it."""


with open(RATES_FILE, newline="") as _f:
    RATES = tuple(Rate(**{**row, "tokens_per_s": float(row["tokens_per_s"])}) for row in csv.DictReader(_f))

DEVICES = tuple(dict.fromkeys(r.device for r in RATES))
SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)([mb])(?![a-z0-9])", re.I)


def parameters(name: str) -> float | None:
    """Parameters a model name states (``Qwen2.5-7B-Instruct``: 7e9, ``SmolLM2-135M``: 1.35e8)."""
    found = SIZE.findall(name)
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e6 if unit.lower() == "m" else 1e9)


SIZES = {r.size: parameters(r.size) for r in RATES}


def rate(kind: str, size: str, backend: str, device: str) -> Rate:
    """The table's row for this work: on ``device`` where the table has one, else another's."""
    rows = [r for r in RATES if (r.kind, r.size, r.backend) == (kind, size, backend)]
    if not rows:
        raise CostError(f"no throughput for {kind} at {size} with {backend} in sparta.cost.RATES")
    return next((r for r in rows if r.device == device), rows[0])


@dataclass
class RunCost:
    """A run's tokens per stage and iteration (0: the initial pool's evaluation)."""

    run: str
    method: str
    members: int
    size: str
    size_note: str
    backend: str
    iterations: int
    prompts: int
    stages: dict[str, dict[int, Tokens]]
    rates: dict[str, Rate]
    notes: list[str] = field(default_factory=list)

    def hours(self, tokens: Tokens) -> float:
        """GPU-hours of ``tokens`` at this run's rates."""
        r = self.rates
        seconds = tokens.read / r["read"].tokens_per_s + tokens.generated / r["decode"].tokens_per_s
        return (seconds + tokens.trained / r["train"].tokens_per_s) / 3600

    def total(self, stage: str | None = None) -> Tokens:
        """Tokens of one stage, or of the whole run, over every iteration."""
        stages = [self.stages[stage]] if stage else self.stages.values()
        return sum((t for per in stages for t in per.values()), Tokens())


def size_class(s: Settings, a: Assumptions) -> tuple[str, str]:
    """The size class of a run's largest base (the nearest of :data:`SIZES`), and why."""
    if a.size:
        return a.size, "--size"
    found = {}
    for m in s.members:
        spec = s.base_models.get(m.base)
        name = (spec.path or spec.gguf_file or m.base) if spec else m.base
        count = parameters(str(name))
        if count is None:
            raise CostError(f"cannot tell the size of base {m.base!r} ({name}) from its name: pass --size")
        found[name] = count
    name = max(found, key=found.get)
    size = min(SIZES, key=lambda c: abs(math.log(SIZES[c] / found[name])))
    return size, str(name).removeprefix("hf://")


def run_cost(run: str, s: Settings, a: Assumptions, iterations: bool = True, initial: bool = True) -> RunCost:
    """The cost of one run: its iterations (``iterations``) and the initial pool's evaluation
    (``initial``; a study's shared initial pool is a run of its own)."""
    n = workload.lengths(s, a)
    p = workload.prompts_per_iteration(s, n)
    tasks = [workload.task_size(t, s, n, a) for t in s.evaluation.tasks]
    stages: dict[str, dict[int, Tokens]] = {}
    if iterations:
        for name, fn in GENERATING[s.method]:
            stages[name] = {t: fn(s, n, p) for t in range(1, s.iterations + 1)}
        stages["aggregation"] = {t: Tokens() for t in range(1, s.iterations + 1)}
        stages["DPO training"] = {t: workload.dpo(s, n, p, t) for t in range(1, s.iterations + 1)}
    checkpoints = [t for t in workload.evaluated(s) if (t == 0 and initial) or (t > 0 and iterations)]
    if checkpoints:
        stages["evaluation"] = {t: workload.evaluation(s, n, tasks, a) for t in checkpoints}
    size, why = size_class(s, a)
    rates = {
        k: rate(k, size, "trl" if k == "train" else s.backend, a.device) for k in ("read", "decode", "train")
    }
    notes = [*n.notes, *(f"evaluation task {t.name}: {t.note}" for t in tasks)]
    return RunCost(run, s.method, len(s.members), size, why, s.backend, s.iterations, p, stages, rates, notes)


def study_costs(config: dict, a: Assumptions) -> list[RunCost]:
    """The cost of every run of a (merged, schema-checked) config: each experiment, and each
    initial pool a study shares (its evaluation at checkpoint 0)."""
    try:
        study = expand(config)
    except SettingsError as e:
        raise CostError(f"config problems:\n  - {e}") from e
    runs = [
        run_cost(run, s, a, initial=study.init_of.get(run, run) == run)
        for run, s in study.experiments.items()
    ]
    runs += [run_cost(run, s, a, iterations=False) for run, s in study.inits.items()]
    return runs


def read_config(paths: Sequence[str | Path], base: str | Path = "config.yaml") -> dict:
    """``paths`` merged over ``base`` in order (:func:`sparta.config.read_config_files`, as
    Snakemake merges --configfile), checked against the schema."""
    try:
        return validate(read_config_files([base, *paths]))
    except ConfigError as e:
        raise CostError(str(e)) from None


def _figures(run: RunCost, tokens: Tokens) -> dict:
    return {**dataclasses.asdict(tokens), "gpu_hours": round(run.hours(tokens), 4)}


def as_json(runs: Sequence[RunCost], a: Assumptions) -> dict:
    """Every run's tokens and GPU-hours per stage and iteration, the study's total, the rates
    used and the assumptions."""
    out = []
    for r in runs:
        stages = [
            {
                "stage": name,
                "iterations": {str(t): _figures(r, tok) for t, tok in per.items()},
                "total": _figures(r, r.total(name)),
            }
            for name, per in r.stages.items()
        ]
        head = {
            k: getattr(r, k) for k in ("run", "method", "members", "size", "backend", "iterations", "prompts")
        }
        rates = {k: {f: getattr(v, f) for f in ("size", "backend", "device")} for k, v in r.rates.items()}
        out.append({**head, "rates": rates, "stages": stages, "total": _figures(r, r.total())})
    used = {v for r in runs for v in r.rates.values()}
    return {
        "runs": out,
        "total": {
            **dataclasses.asdict(sum((r.total() for r in runs), Tokens())),
            "gpu_hours": round(sum(r.hours(r.total()) for r in runs), 4),
        },
        "rates": [dataclasses.asdict(x) for x in RATES if x in used],
        "assumptions": assumption_lines(runs, a),
    }


def assumption_lines(runs: Sequence[RunCost], a: Assumptions) -> list[str]:
    """What the figures assume, each line once."""
    lines = [
        f"answers and judgments run to {a.fill:g} x their max_new_tokens; every duel (or prompt) "
        "makes a pair; meta-rewarding re-judges an answer of every prompt and member: upper bounds",
        f"prompt text at about {workload.CHARS_PER_TOKEN} characters a token; the chat template adds "
        f"{workload.CHAT_TEMPLATE_TOKENS} tokens and the system prompt; judge prompts' own text measured "
        "the same way",
        "expected-mode judging reads its prompt once on the hf backend (a few candidate tokens "
        "are not counted); on vllm each candidate prefix is a request that recomputes the prompt's "
        f"last partial block of {workload.VLLM_BLOCK} tokens (pointwise 1-10: 10 such requests, "
        "pairwise and meta 2, additive 0); prefix caching across judgments is not credited",
        "not counted: the initial pool's SFT, a job's start (imports, loading the base, engine "
        "warm-up), the analyses",
    ]
    for r in runs:
        lines += [f"{r.size} class: {r.size_note}", *r.notes]
    return list(dict.fromkeys(lines))


def _number(x: int) -> str:
    return f"{x:,}"


def _hours(h: float) -> str:
    if h == 0:
        return "0"
    return f"{h:,.0f}" if h >= 100 else f"{h:.1f}" if h >= 10 else f"{h:.2f}" if h >= 0.01 else f"{h:.4f}"


def _groups(per: dict[int, Tokens]) -> list[tuple[str, Tokens]]:
    """Consecutive iterations with the same tokens as one line: ("1-8 each", tokens)."""
    out: list[tuple[list[int], Tokens]] = []
    for t, tok in per.items():
        if out and out[-1][1] == tok and out[-1][0][-1] == t - 1:
            out[-1][0].append(t)
        else:
            out.append(([t], tok))
    return [(f"{ts[0]}-{ts[-1]} each" if len(ts) > 1 else f"{ts[0]}", tok) for ts, tok in out]


def _cells(r: RunCost, tok: Tokens) -> tuple[str, str, str, str]:
    return _number(tok.generated), _number(tok.read), _number(tok.trained), _hours(r.hours(tok))


def unit(rates: dict[str, Rate]) -> str:
    return "CPU" if all(r.device == "CPU" for r in rates.values()) else "GPU"


ROW = "  {:<20} {:<11} {:>15} {:>15} {:>15} {:>9}"


def run_lines(r: RunCost) -> list[str]:
    """A run's table: per stage its iterations' tokens and GPU-hours, and its totals."""
    lines = [ROW.format("stage", "iteration", "generated", "read", "trained", f"{unit(r.rates)}-h")]
    for name, per in r.stages.items():
        for k, (label, tok) in enumerate(_groups(per)):
            lines.append(ROW.format(name if k == 0 else "", label, *_cells(r, tok)))
        tok = r.total(name)
        if len(per) > 1 and tok != Tokens():
            lines.append(ROW.format("", "total", *_cells(r, tok)))
    return [*lines, ROW.format("run total", "", *_cells(r, r.total()))]


def _heading(r: RunCost) -> str:
    what = (
        f"{r.method}, {r.members} members, {r.iterations} iterations x {r.prompts:,} prompts"
        if "DPO training" in r.stages
        else f"the initial pool's evaluation, {r.members} members"
    )
    return f"{what}; {r.size} class ({r.size_note}), backend {r.backend}"


def _names(runs: list[str]) -> str:
    """Runs that cost the same; a study's as ``<experiments>; seeds 1, 2 (4 runs, each)``."""
    if len(runs) == 1:
        return runs[0]
    found = [re.fullmatch(r"(.+)-seed(\d+)", r) for r in runs]
    if all(found):
        names, seeds = (list(dict.fromkeys(m.group(k) for m in found)) for k in (1, 2))
        if len(names) * len(seeds) == len(runs):
            return f"{', '.join(names)}; seeds {', '.join(seeds)} ({len(runs)} runs, each)"
    return f"{', '.join(runs)} ({len(runs)} runs, each)"


def text(runs: Sequence[RunCost], a: Assumptions) -> str:
    """The readable report: one table per group of runs that cost the same, the total, the
    rates used and the assumptions."""
    groups: dict[str, list[RunCost]] = {}
    for r in runs:
        key = json.dumps(
            [_heading(r), {k: {t: dataclasses.astuple(v) for t, v in p.items()} for k, p in r.stages.items()}]
        )
        groups.setdefault(key, []).append(r)
    lines = []
    for same in groups.values():
        lines += [_names([r.run for r in same]), f"  {_heading(same[0])}"]
        lines += [*run_lines(same[0]), ""]
    tok = sum((r.total() for r in runs), Tokens())
    hours = sum(r.hours(r.total()) for r in runs)
    lines.append(
        f"all {len(runs)} run{'s' * (len(runs) > 1)}: {_number(tok.generated)} generated, "
        f"{_number(tok.read)} read, {_number(tok.trained)} trained tokens; {_hours(hours)} "
        f"{unit(runs[0].rates)}-hours"
    )
    lines += ["", "throughput used (tokens/s on one GPU, or on the CPU its row names):"]
    used = {v for r in runs for v in r.rates.values()}
    for x in (x for x in RATES if x in used):
        figure = f"{x.kind:<6} {x.size:>4} {x.backend:<4} {x.device} {x.tokens_per_s:>9,.0f}"
        lines.append(f"  {figure}  {x.status}: {x.source}")
    lines += ["", "assumptions:", *(f"  - {line}" for line in assumption_lines(runs, a))]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m sparta.cost",
        description="Tokens and GPU-hours of every run of a config, per stage and iteration, from the "
        "config alone.",
    )
    ap.add_argument(
        "configfile", nargs="+", help="configs merged over the base in order (as snakemake's --configfile)"
    )
    ap.add_argument("--base", default="config.yaml", help="the workflow's config file (default: config.yaml)")
    ap.add_argument("--json", action="store_true", help="JSON for machines instead of the tables")
    ap.add_argument(
        "--fill",
        type=float,
        default=1.0,
        help="share of max_new_tokens answers and judgments use (default 1: upper bound)",
    )
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        default=workload.DEFAULT_PROMPT_TOKENS,
        help="tokens of a prompt whose file is not on disk",
    )
    ap.add_argument(
        "--size", choices=sorted(SIZES), help="the models' size class (default: from the base models' names)"
    )
    ap.add_argument(
        "--device", choices=DEVICES, default="H100", help="whose throughputs to use where the table has them"
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = (cli := parser()).parse_args(argv)
    if not 0 < args.fill <= 1 or args.prompt_tokens < 1:
        cli.error("--fill is in (0, 1] and --prompt-tokens at least 1")
    a = Assumptions(args.fill, args.prompt_tokens, args.size, args.device, Path(args.base).resolve().parent)
    try:
        runs = study_costs(read_config(args.configfile, args.base), a)
    except CostError as e:
        print(e, file=sys.stderr)
        return 2
    print(json.dumps(as_json(runs, a), indent=1) if args.json else text(runs, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
