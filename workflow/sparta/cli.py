"""`sparta`: inspect a run, finished or in progress (pairs, standings, show, config, export,
compare; docs/reference/cli.md is generated from :func:`parser`).

Every command prints a text table, or JSON with --json. A bad path or a missing iteration
gives a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import yaml

from . import layout, tables
from .config import ConfigError, read_config_files, validate
from .settings import Settings, SettingsError
from .study import expand


class CLIError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors end with the form the command expects
    (``expected``): an option the command lacks, or a missing argument, shows the way to write
    it (``sparta pairs results/default --iteration 1`` is ``sparta pairs results/default/iter_1``)."""

    def __init__(self, *args, expected: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.expected = expected
        self.commands: dict[str, Parser] = {}  # the top parser's: name -> the command's parser

    def error(self, message: str):
        self.print_usage(sys.stderr)
        hint = f"\n{self.prog}: expected {self.expected}" if self.expected else ""
        self.exit(2, f"{self.prog}: error: {message}{hint}\n")


def _iteration_dir(path: str) -> Path:
    folder = Path(path)
    if not folder.is_dir():
        raise CLIError(f"no such iteration folder: {folder}")
    if layout.iteration_of(folder) is None:
        raise CLIError(f"{folder} is not an iteration folder (expected .../{layout.iteration_name('<t>')})")
    if not layout.rounds_of(folder):
        raise CLIError(f"{folder} has no rounds yet (iteration not started)")
    return folder


def disagreement(prefs: pd.DataFrame, judgments: pd.DataFrame) -> pd.Series:
    """Share of the judges of each pair whose own scores disagree with the collective label."""
    if len(prefs) == 0:
        return pd.Series(dtype=float)
    s = judgments.dropna(subset=["score"]).set_index(["duel_id", "judge", "target"])["score"]
    out = []
    for p in prefs.itertuples(index=False):
        votes = []
        for judge in judgments.loc[judgments["duel_id"] == p.duel_id, "judge"].unique():
            c, r = s.get((p.duel_id, judge, p.chosen_member)), s.get((p.duel_id, judge, p.rejected_member))
            if c is not None and r is not None:
                votes.append(r > c)
        out.append(sum(votes) / len(votes) if votes else float("nan"))
    return pd.Series(out, index=prefs.index)


PAIR_COLUMNS = ["duel_id", "prompt", "chosen_member", "rejected_member", "chosen_score", "rejected_score"]
PAIR_COLUMNS += ["margin", "disagreement", "chosen", "rejected"]


def cmd_pairs(args) -> pd.DataFrame:
    folder = _iteration_dir(args.iteration_dir)
    merged = folder / "preferences.parquet"
    prefs = (
        tables.read(merged, "preferences")
        if merged.exists()
        else tables.read_many(layout.round_files(folder, "preferences.parquet"), "preferences")
    )
    judgments = tables.read_many(layout.round_files(folder, "judgments/*.parquet"), "judgments")
    prefs = prefs.assign(disagreement=disagreement(prefs, judgments))
    members = sorted(set(tables.read_many(layout.round_files(folder, "state.parquet"), "state")["member"]))
    for flag, name in (("--member", args.member), ("--trainee", args.trainee)):
        if name and members and name not in members:
            raise CLIError(f"{flag} {name}: no such member in {folder}; its members: {', '.join(members)}")
    if args.trainee:
        from .train import pairs_of  # torch

        prefs = pairs_of(prefs, args.trainee)
    if args.member:
        prefs = prefs[(prefs["chosen_member"] == args.member) | (prefs["rejected_member"] == args.member)]
    if args.min_margin is not None:
        prefs = prefs[prefs["margin"] >= args.min_margin]
    if args.max_margin is not None:
        prefs = prefs[prefs["margin"] <= args.max_margin]
    if args.min_disagreement is not None:
        prefs = prefs[prefs["disagreement"] >= args.min_disagreement]
    prefs = prefs.head(args.limit) if args.limit else prefs
    if args.trl:
        write_trl_pairs(prefs, folder.parent, args.trl)
    return prefs[PAIR_COLUMNS]


def write_trl_pairs(prefs: pd.DataFrame, run: Path, out: str | Path) -> Path:
    """The pairs as sparta's own DPO gives them to TRL (``train.preference_dataset``): prompt
    = [system prompt of the run's settings.yaml, user prompt], chosen and rejected = one
    assistant message each, so TRL's DPOTrainer applies the model's chat template."""
    from .train import preference_dataset  # torch

    settings = layout.RunFolder(run).settings
    if not settings.is_file():
        raise CLIError(f"--trl needs the run's settings ({settings}) for its system prompt")
    system = (yaml.safe_load(settings.read_text()) or {}).get("system_prompt")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pq.write_table(preference_dataset(prefs.reset_index(drop=True), system).data.table, tmp)
    tmp.replace(out)
    return out


def _run_dir(path: str) -> layout.RunFolder:
    run = layout.RunFolder(path)
    if not run.path.is_dir():
        raise CLIError(f"no such run folder: {run.path}")
    if not run.is_run():
        first = layout.iteration_name(0)
        raise CLIError(f"{run.path} is not a run folder (no {first}/ inside; expected results/<experiment>)")
    return run


def cmd_standings(args) -> pd.DataFrame:
    run = _run_dir(args.run)
    folder = run.path
    for rnd in run.rounds():
        if not (rnd / "state.parquet").exists():
            print(
                f"sparta standings: {rnd.relative_to(folder)} has no state.parquet yet "
                "(in progress, or damaged: rerun snakemake)",
                file=sys.stderr,
            )
    frames = [tables.read(p, "state") for p in run.states()]
    if not frames:
        raise CLIError(f"{folder} has no reputation state yet")
    states = pd.concat(frames, ignore_index=True)
    return states[["iteration", "round", "member", "reputation", "deviation", "judge_weight"]].sort_values(
        ["iteration", "round", "reputation"], ascending=[True, True, False]
    )


def cmd_show(args) -> dict:
    m = re.fullmatch(r"t(\d+)-\d+", args.duel_id)
    if not m:
        raise CLIError(f"{args.duel_id!r} is not a duel id (like t01-00003)")
    if args.run:
        run = _run_dir(args.run)
    else:
        runs = layout.run_folders()
        if len(runs) != 1:
            raise CLIError("give the run folder with --run results/<experiment>")
        run = layout.RunFolder(runs[0])
    folder = run.iteration(int(m.group(1)))
    if not folder.is_dir():
        raise CLIError(f"iteration {int(m.group(1))} has not started in {run.path}")
    duels = tables.read_many(layout.round_files(folder, "duels.parquet"), "duels")
    duel = duels[duels["duel_id"] == args.duel_id]
    if len(duel) == 0:
        raise CLIError(f"no duel {args.duel_id} in {folder}")
    d = duel.iloc[0]
    rnd = folder / layout.round_name(int(d["round"]))
    responses = tables.read_many(sorted(rnd.glob("responses/*.parquet")), "responses")
    judgments = tables.read_many(sorted(rnd.glob("judgments/*.parquet")), "judgments")
    history = tables.read_many(sorted(rnd.glob("history.parquet")), "history")
    answers = responses[responses["duel_id"] == args.duel_id].set_index("member")["response"].to_dict()
    js = judgments[judgments["duel_id"] == args.duel_id]
    h = history[history["duel_id"] == args.duel_id]
    return {
        "duel_id": args.duel_id,
        "iteration": int(d["iteration"]),
        "round": int(d["round"]),
        "prompt": d["prompt"],
        "member_a": d["member_a"],
        "member_b": d["member_b"],
        "answer_a": answers.get(d["member_a"]),
        "answer_b": answers.get(d["member_b"]),
        "judgments": [
            {
                "judge": r.judge,
                "target": r.target,
                "score": None if pd.isna(r.score) else float(r.score),
                "error": r.error if isinstance(r.error, str) else None,
                "raw": r.raw,
            }
            for r in js.itertuples(index=False)
        ],
        "outcome": h["outcome"].iloc[0] if len(h) else "pending",
        "score_a": None if len(h) == 0 or pd.isna(h["score_a"].iloc[0]) else float(h["score_a"].iloc[0]),
        "score_b": None if len(h) == 0 or pd.isna(h["score_b"].iloc[0]) else float(h["score_b"].iloc[0]),
    }


def cmd_config(args) -> dict:
    """Every setting of a config with the defaults filled in (config.yaml, then each
    --configfile merged over it, as snakemake does); of a study config, every run's."""
    try:
        config = read_config_files([args.base, *args.configfile])
        validate(config)
        if "study" in config:  # every run of the study: <study>/<experiment>-seed<s>
            return {exp: s.to_dict() for exp, s in expand(config).experiments.items()}
        return Settings.from_config(config).to_dict()
    except (ConfigError, SettingsError) as e:
        raise CLIError(str(e)) from None


def cmd_compare(args):
    """A study's comparison table (and its inference cost)."""
    from .compare import format_table  # scipy

    folder = Path(args.study)
    path = folder / layout.COMPARISON
    if not path.exists():
        raise CLIError(
            f"no comparison in {folder}: run the study to its end (snakemake --configfile <study>.yaml)"
        )
    table = tables.read(path, "comparison")
    if args.json:
        return table
    text = format_table(table)
    cost_path = folder / layout.COST
    if cost_path.exists():
        spent = tables.read(cost_path, "cost")
        text += "\ninference per iteration (mean over seeds):\n" + spent.to_string(index=False)
    return text


def cmd_export(args) -> dict:
    from .export import ExportError, export  # huggingface_hub, and torch for a merge

    names = ("member", "iteration", "best", "merge", "base_id", "dtype", "max_shard_size", "private", "base")
    try:
        return export(args.run, args.out, push_to=args.push, **{k: getattr(args, k) for k in names})
    except ExportError as e:
        raise CLIError(str(e)) from None


def _print(result, as_json: bool) -> None:
    if isinstance(result, str):
        print(result)
        return
    if as_json:
        frame = isinstance(result, pd.DataFrame)
        print(result.to_json(orient="records", indent=1) if frame else json.dumps(result, indent=1))
        return
    if isinstance(result, dict) and "duel_id" not in result:  # config, export
        print(yaml.safe_dump(result, sort_keys=False), end="")
        return
    if isinstance(result, pd.DataFrame):
        if len(result) == 0:
            print("(nothing)")
            return
        shown = result.copy()
        for c in shown.columns:
            if shown[c].dtype == object or str(shown[c].dtype).startswith(("str", "string")):
                shown[c] = shown[c].astype(str).str.replace("\n", " ").str.slice(0, 60)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        return
    for key in ("duel_id", "iteration", "round", "prompt", "member_a", "answer_a", "member_b", "answer_b"):
        print(f"{key:>9}: {result[key]}")
    print(f"  outcome: {result['outcome']}  (score a {result['score_a']}, score b {result['score_b']})")
    for j in result["judgments"]:
        score = "null" if j["score"] is None else f"{j['score']:.2f}"
        raw = j["raw"].replace("\n", " ")[:80]
        print(f"    judge {j['judge']:<14} on {j['target']:<14} {score:>6}  {j['error'] or ''} {raw}")


EXPECTED = {
    "sparta": "a command first: sparta {pairs,standings,show,config,export,compare} ... "
    "(sparta <command> --help)",
    "pairs": "the iteration's folder: sparta pairs results/<experiment>/iter_<t> [options] "
    "(iteration 1 of results/default: results/default/iter_1)",
    "standings": "the run folder: sparta standings results/<experiment>",
    "show": "a duel id: sparta show t01-00003 [--run results/<experiment>]",
    "config": "config files: sparta config [--base config.yaml] [--configfile my.yaml ...]",
    "export": "the run folder, then a new folder: sparta export results/<experiment> OUT --member NAME "
    "[--iteration t] (or --best TASK)",
    "compare": "the study's folder: sparta compare results/<study>",
}
"""What each command's usage errors say it expects (:class:`Parser`)."""


def parser() -> argparse.ArgumentParser:
    """The ``sparta`` command's parser (the CLI reference page is generated from it)."""
    ap = Parser(prog="sparta", description="Inspect a Sparta run.", expected=EXPECTED["sparta"])
    sub = ap.add_subparsers(dest="command", required=True)

    def command(name: str, about: str) -> Parser:
        return sub.add_parser(name, help=about, expected=EXPECTED[name])

    p = command("pairs", "list the preference pairs of an iteration")
    p.add_argument("iteration_dir", help="results/<experiment>/iter_<t>")
    p.add_argument("--member", help="pairs where this member won or lost")
    p.add_argument("--min-margin", type=float)
    p.add_argument("--max-margin", type=float)
    p.add_argument("--min-disagreement", type=float, help="share of judges against the label, 0-1")
    p.add_argument("--trainee", help="the pairs this member trains on (baselines: its own; Sparta: all)")
    p.add_argument("--limit", type=int)
    p.add_argument(
        "--trl",
        metavar="OUT.parquet",
        help="also write the pairs as TRL's conversational DPO data (prompt with the run's system prompt)",
    )
    s = command("standings", "reputations and deviations per round")
    s.add_argument("run", help="results/<experiment>")
    d = command("show", "one duel: prompt, answers, every judgment")
    d.add_argument("duel_id")
    d.add_argument("--run", help="results/<experiment> (default: the only one under ./results)")
    c = command("config", "every setting of a config, defaults filled in (YAML)")
    c.add_argument("--base", default="config.yaml", help="the workflow's config file (default: config.yaml)")
    c.add_argument(
        "--configfile",
        nargs="+",
        action="extend",
        default=[],
        help="merged over the base, in order (several files, as snakemake's --configfile)",
    )
    e = command("export", "a member as a PEFT adapter folder or a merged model folder")
    _export_arguments(e)
    k = command("compare", "a study's comparison table with its intervals")
    k.add_argument("study", help="results/<study>")
    for command in (p, s, d, c, e, k):
        command.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.commands = dict(sub.choices)
    return ap


def _export_arguments(e: argparse.ArgumentParser) -> None:
    e.add_argument("run", help="results/<experiment>")
    e.add_argument("out", help="a new folder")
    e.add_argument("--member", help="the member to export")
    e.add_argument("--iteration", type=int, help="its checkpoint (default: the last; 0 = initial pool)")
    e.add_argument("--best", metavar="TASK", help="the member the evaluation selected for TASK")
    e.add_argument("--merge", action="store_true", help="merge the adapter into the base (a plain model)")
    e.add_argument(
        "--base",
        metavar="FOLDER",
        help="the member's base: a model folder, or a hub id ORG/NAME (default: the one its member.json "
        "names, else _bases/ or results/_bases/ in or above the run folder)",
    )
    e.add_argument(
        "--base-id", metavar="ORG/NAME", help="the public hub base the adapter names (default: the run's)"
    )
    e.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="dtype of a merged model (default: the run's, resolved here: auto = bf16 on GPU, fp32 on CPU)",
    )
    e.add_argument("--max-shard-size", default="2GB", help="largest safetensors shard of a merged model")
    e.add_argument("--push", metavar="ORG/NAME", help="upload the folder to this hub repo (network, token)")
    e.add_argument("--private", action="store_true", help="with --push: create the repository private")


def _iteration_option(extra: list[str]) -> str | None:
    """The value of an ``--iteration t`` (or ``--iteration=t``) among arguments not taken."""
    for i, arg in enumerate(extra):
        if arg.startswith("--iteration="):
            return arg.split("=", 1)[1]
        if arg == "--iteration" and i + 1 < len(extra):
            return extra[i + 1]
    return None


def _parse(argv) -> argparse.Namespace:
    """The arguments; one the command does not take is reported by the command's own parser
    (its usage and expected form), not by the top one's; ``pairs RUN --iteration t`` is shown
    the folder it means."""
    ap = parser()
    args, extra = ap.parse_known_args(argv)
    if extra:
        message = f"unrecognized arguments: {' '.join(extra)}"
        t = _iteration_option(extra) if args.command == "pairs" else None
        if t is not None and t.isdigit():
            folder = f"{args.iteration_dir.rstrip('/')}/{layout.iteration_name(t)}"
            message += f" (the iteration is part of the folder: sparta pairs {folder})"
        ap.commands[args.command].error(message)
    return args


def main(argv=None) -> int:
    args = _parse(argv)
    commands = {
        f.__name__[4:]: f for f in (cmd_pairs, cmd_standings, cmd_show, cmd_config, cmd_export, cmd_compare)
    }
    try:
        result = commands[args.command](args)
    except (CLIError, tables.TableError, FileNotFoundError) as e:
        print(f"sparta {args.command}: {e}", file=sys.stderr)
        return 2
    try:
        _print(result, args.json)
        sys.stdout.flush()
    except BrokenPipeError:  # `sparta pairs ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
