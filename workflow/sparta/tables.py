"""Parquet schemas of the tables the stages exchange, and atomic read/write helpers.

This is the one place that knows column names and types. Every writer goes through
:func:`write`, which casts to the schema and renames a finished temporary file into place,
so a killed job never leaves a file that looks complete.

A member's name is in every table under the name of its role there, always spelled with
``member``: ``member`` (who answered: responses; whose row: state, evaluation, scores, training
logs, analyses), ``member_a`` / ``member_b`` (the two combatants of a duel: duels, history),
``chosen_member`` / ``rejected_member`` and ``trainee`` (preferences), ``judge`` and ``target``
(who judged whom: judgments). A table's kind is the stem of the file it is written to
(``reputation_vs_performance.parquet`` is kind ``reputation_vs_performance``); files of one
shape share a schema (:data:`SAME_SCHEMA`). Tables written before the columns were named so
(``model``, ``model_a``, ``chosen_model``, ...) read with today's names (:data:`RENAMED`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .files import umask

_str = pa.string()
_i32 = pa.int32()
_f64 = pa.float64()
_i64 = pa.int64()

SCHEMAS: dict[str, pa.Schema] = {
    # one row per prompt of a task split (alignment, validation, test)
    # (answer: ground truth for evaluation; reference: a reference answer, SPIN's chosen)
    "prompts": pa.schema(
        [("prompt_id", _str), ("prompt", _str), ("answer", _str), ("domain", _str), ("reference", _str)]
    ),
    # one row per duel, in the order the duels are played
    "duels": pa.schema(
        [
            ("iteration", _i32),
            ("round", _i32),
            ("duel_id", _str),
            ("prompt_id", _str),
            ("prompt", _str),
            ("answer", _str),
            ("reference", _str),
            ("member_a", _str),
            ("member_b", _str),
            # how member_b was drawn: uniform (probability alpha) or top_k, and from whom
            ("opponent_branch", _str),
            ("opponent_candidates", pa.list_(_str)),
        ]
    ),
    # one row per (duel, combatant, sample): a baseline member answers a prompt several times
    "responses": pa.schema(
        [
            ("duel_id", _str),
            ("member", _str),
            ("sample", _i32),
            ("response", _str),
            ("n_tokens", _i32),
            ("finish_reason", _str),
        ]
    ),
    # one row per (duel, judge, combatant); score is null when the output was unusable
    "judgments": pa.schema(
        [
            ("duel_id", _str),
            ("judge", _str),
            ("target", _str),
            ("sample", _i32),  # which answer of the target (baselines answer several times)
            ("kind", _str),  # score (of an answer) | meta (a meta-judge's verdict on two judgments)
            ("score", _f64),
            ("raw", _str),
            ("error", _str),
            ("truncated", pa.bool_()),
            ("format", _str),  # pointwise | pairwise
            # the defences on: secret_labels, datamark, plain_text, sanitize, fence (or none)
            ("defences", _str),
            # the word-list monitor flagged this answer (altered for the judge only with sanitize)
            ("sanitized", pa.bool_()),
            ("prompt_tokens", _i64),  # tokens the judge read for this answer (inference cost)
            ("requests", _i64),  # model requests made for it (a pairwise duel: 1 per order)
            ("generated_tokens", _i64),  # tokens the judge generated for it (generate mode)
        ]
    ),
    # one row per duel in update order
    "history": pa.schema(
        [
            ("iteration", _i32),
            ("round", _i32),
            ("duel_id", _str),
            ("member_a", _str),
            ("member_b", _str),
            ("score_a", _f64),
            ("score_b", _f64),
            ("n_judges", _i32),  # judges with a usable score of both answers
            ("dropped_judges", _i32),  # judges left out: a usable score of one answer only
            ("gap", _f64),  # score difference Eq. (1) used (after combatant down-weighting)
            ("reputation_a_before", _f64),
            ("reputation_a_after", _f64),
            ("deviation_a_before", _f64),
            ("deviation_a_after", _f64),
            ("reputation_b_before", _f64),
            ("reputation_b_after", _f64),
            ("deviation_b_before", _f64),
            ("deviation_b_after", _f64),
            ("kappa", _f64),
            ("outcome", _str),
        ]
    ),
    # one row per member: the reputation state after a round
    "state": pa.schema(
        [
            ("iteration", _i32),
            ("round", _i32),
            ("member", _str),
            ("reputation", _f64),
            ("deviation", _f64),
            ("judge_weight", _f64),
            ("downweighted_at", _i32),
            ("recent_deltas", pa.list_(_f64)),
            ("duels_this_iteration", _i64),
        ]
    ),
    # one row per kept duel: what DPO trains on
    "preferences": pa.schema(
        [
            ("iteration", _i32),
            ("round", _i32),
            ("duel_id", _str),
            ("prompt_id", _str),
            ("prompt", _str),
            ("chosen", _str),
            ("rejected", _str),
            ("chosen_member", _str),
            ("rejected_member", _str),
            ("chosen_score", _f64),
            ("rejected_score", _f64),
            ("margin", _f64),
            ("trainee", _str),  # who trains on the pair: null for every member (Sparta)
            ("kind", _str),  # actor (an answer pair) | judge (meta-rewarding's judgment pair)
        ]
    ),
    # --- evaluation ------------------------------------------------------------------------
    # one row per (task, split, example) of one member at one checkpoint (0 = initial pool);
    # mc1 only for truthfulqa_mc
    "evaluation": pa.schema(
        [
            ("checkpoint", _i32),
            ("member", _str),
            ("task", _str),
            ("metric", _str),
            ("split", _str),
            ("example_id", _str),
            ("prediction", _str),
            ("score", _f64),
            ("mc1", _f64),
        ]
    ),
    # mean score per (task, checkpoint, member, split) over n examples
    "scores": pa.schema(
        [
            ("task", _str),
            ("metric", _str),
            ("checkpoint", _i32),
            ("member", _str),
            ("split", _str),
            ("score", _f64),
            ("n", _i64),
        ]
    ),
    # per task: the best member on validation (initial pool, final members, the run's
    # selection), its test score, and how many candidates tied on validation
    "selection": pa.schema(
        [
            ("task", _str),
            ("stage", _str),
            ("checkpoint", _i32),
            ("member", _str),
            ("validation", _f64),
            ("test", _f64),
            ("tied", _i64),  # candidates with the best validation score (> 1: tie-broken)
        ]
    ),
    # --- training ----------------------------------------------------------------------------
    # a trainer's log history (SFT of iteration 0, DPO of iteration t): one row per logged step,
    # the last row its summary (train_loss); examples = SFT examples or DPO pairs
    "training_log": pa.schema(
        [
            ("member", _str),
            ("iteration", _i32),
            ("stage", _str),
            ("examples", _i64),
            ("step", _i64),
            ("epoch", _f64),
        ]
        + [
            (name, _f64)
            for name in (
                ("loss", "grad_norm", "learning_rate")
                + ("rewards_chosen", "rewards_rejected", "rewards_accuracies", "rewards_margins")
                + ("logps_chosen", "logps_rejected", "train_loss", "train_runtime")
            )
        ]
    ),
    # held-out preference accuracy of a member before and after its DPO of iteration t, on the
    # pairs of iteration t + 1 (not trained on): the share whose chosen answer the member finds
    # likelier (mean log-probability per token), with a 95% Wilson interval
    "pair_accuracy": pa.schema(
        [
            ("iteration", _i32),
            ("member", _str),
            ("when", _str),  # before | after
            ("checkpoint", _i32),
            ("pairs", _i64),
            ("agree", _i64),
            ("accuracy", _f64),
            ("accuracy_low", _f64),
            ("accuracy_high", _f64),
            ("mean_margin", _f64),  # chosen minus rejected, mean log-probability per token
        ]
    ),
    # --- studies -----------------------------------------------------------------------------
    # per task and experiment (and per initial pool: best init): the best-on-validation
    # member's test score (mean and sd over seeds; select_from: all | final | initial; selected
    # and *_per_seed: "seed=value;..." per seed, member@checkpoint for selected) and its paired
    # differences to the run's own best init and to Sparta: item bootstrap interval stratified
    # by seed (conditional on these training runs) with the exact paired sign-flip test's p,
    # Holm-adjusted over the table's family (family_size comparisons; _significant: adjusted
    # p < 0.05), a seed-level t interval with 5 seeds or more (null below), and the minimum
    # detectable differences: item-level at alpha 0.05 (_mde) and at Holm's first step
    # (_mde_holm), seed-level from the between-seed variance with 5 seeds or more (_seed_mde,
    # _seed_mde_holm)
    "comparison": pa.schema(
        [
            ("task", _str),
            ("experiment", _str),
            ("seeds", _i64),
            ("items", _i64),
            ("test", _f64),
            ("test_sd", _f64),
            ("select_from", _str),
            ("selected", _str),
            ("test_per_seed", _str),
            ("family_size", _i64),
        ]
        + [
            (f"{ref}{x}", {"_significant": pa.bool_(), "_per_seed": _str}.get(x, _f64))
            for ref in ("vs_best_init", "vs_sparta")
            for x in (
                ("", "_low", "_high", "_p", "_p_holm", "_significant", "_per_seed")
                + ("_seed_low", "_seed_high", "_seed_p", "_seed_p_holm")
                + ("_mde", "_mde_holm", "_seed_mde", "_seed_mde_holm")
            )
        ]
    ),
    # inference per experiment and iteration, mean over seeds: answers and their tokens;
    # judgments (rows of the judgments tables), the model requests judges made for them (an
    # SPPO comparison in both orders: 2; a meta-judgment: 1 per order), the prompt tokens
    # judges read and the tokens they generated (generate mode)
    "cost": pa.schema(
        [("experiment", _str), ("iteration", _i32)]
        + [
            (c, _f64)
            for c in (
                ("answers", "tokens_generated")
                + ("judgments", "judge_requests", "tokens_judged", "judge_tokens_generated")
            )
        ]
    ),
    # --- analyses ----------------------------------------------------------------------------
    # mean distance between the two answers of a duel, per iteration (embedding: null if off)
    "diversity": pa.schema(
        [("iteration", _i32), ("edit", _f64), ("one_minus_bleu", _f64), ("embedding", _f64), ("duels", _i64)]
    ),
    # per iteration: the preference pairs the members train on, and the pairs dropped because
    # chosen and rejected are the same text
    "pairs": pa.schema([("iteration", _i32), ("pairs", _i64), ("identical", _i64)]),
    # mean words of chosen and rejected answers per iteration
    "lengths": pa.schema([("iteration", _i32), ("chosen_words", _f64), ("rejected_words", _f64)]),
    # preference-label accuracy over informative pairs (exactly one answer right), with a 95%
    # Wilson interval; scope overall | iteration | judge | iteration x judge, and for a
    # baseline trainee | iteration x trainee (the pairs each member trained on; judge = trainee)
    "label_accuracy": pa.schema(
        [
            ("scope", _str),
            ("iteration", _i32),
            ("judge", _str),
            ("correct", _i64),
            ("wrong", _i64),
            ("informative", _i64),
            ("pairs", _i64),
            ("accuracy", _f64),
            ("accuracy_low", _f64),
            ("accuracy_high", _f64),
        ]
    ),
    # per iteration and attack family (judging.FAMILIES; "any": at least one family): chosen /
    # rejected answers the family classifier flags
    "reward_hacking": pa.schema(
        [("iteration", _i32), ("family", _str), ("pairs", _i64)]
        + [
            (f"{side}_{x}", _i64 if x == "flagged" else _f64)
            for side in ("chosen", "rejected")
            for x in ("flagged", "share", "share_low", "share_high")
        ]
    ),
    # per iteration, member (whose judge job wrote the rows; SPPO: the judged member) and kind
    # of judgment (score | meta): rows, those without a usable score, with an error, with a
    # shortened judge prompt, and the pairs made of them (a baseline's; null for Sparta)
    "judging": pa.schema(
        [
            ("iteration", _i32),
            ("member", _str),
            ("kind", _str),
            ("judgments", _i64),
            ("unusable", _i64),
            ("errors", _i64),  # each unusable one, and SPPO's answers with failed comparisons
            ("truncated", _i64),
            ("pairs", _i64),  # actor pairs of score rows, judge pairs of meta rows
        ]
    ),
    # Pearson r between reputation and validation score, per task
    "reputation_vs_performance": pa.schema(
        [("task", _str), ("points", _i64), ("members", _i64), ("r_points", _f64), ("r_member_means", _f64)]
    ),
    # one row per hub id of the runs, as rule hub_download downloaded it (sparta.hub)
    "manifest": pa.schema(
        [
            ("id", _str),
            ("repo", _str),
            ("requested_revision", _str),
            ("commit", _str),
            ("kind", _str),
            ("files", _i64),
            ("size", _i64),
        ]
    ),
    # reputation state at the end of every iteration
    "standings": pa.schema(
        [
            ("iteration", _i32),
            ("member", _str),
            ("reputation", _f64),
            ("deviation", _f64),
            ("judge_weight", _f64),
        ]
    ),
}


SAME_SCHEMA = {
    "reputation_history": "history",  # every round's history of a run, in order
    "final_state": "state",  # the last round's state
    "judge_label_accuracy": "label_accuracy",  # of the judges of other members' answers
    "training": "training_log",  # every member's training logs of a run
}
"""Kinds whose files have the shape of another kind's."""
SCHEMAS.update({kind: SCHEMAS[like] for kind, like in SAME_SCHEMA.items()})

_COMBATANTS = {"model_a": "member_a", "model_b": "member_b"}
RENAMED = {
    "duels": _COMBATANTS,
    "history": _COMBATANTS,
    "reputation_history": _COMBATANTS,
    "responses": {"model": "member"},
    "preferences": {"chosen_model": "chosen_member", "rejected_model": "rejected_member"},
}
"""Columns renamed since runs were made (old name -> name): an older table reads with today's."""

# tables whose frames may leave columns out (written as nulls), and the kinds of their shape:
# summaries, not the contract between the stages of an iteration
OPTIONAL_COLUMNS_OK = {"evaluation", "diversity", "label_accuracy", "training_log"}
OPTIONAL_COLUMNS_OK |= {kind for kind, like in SAME_SCHEMA.items() if like in OPTIONAL_COLUMNS_OK}

# columns added to a table after runs were made with it: a table written before reads with
# them null, so a run made before an update resumes (its cost shows those columns as unknown)
ADDED_COLUMNS = {
    "judgments": ("requests", "generated_tokens"),
    "selection": ("tied",),
    "comparison": tuple(
        f"{ref}{x}"
        for ref in ("vs_best_init", "vs_sparta")
        for x in ("_mde_holm", "_seed_mde", "_seed_mde_holm")
    ),
}


class TableError(ValueError):
    """A table on disk or in memory does not match its schema."""


def columns(kind: str) -> list[str]:
    return list(_schema(kind).names)


def empty(kind: str) -> pd.DataFrame:
    """An empty frame with the columns and dtypes of a table."""
    return _schema(kind).empty_table().to_pandas()


def frame(rows: list[dict], kind: str) -> pd.DataFrame:
    """Rows (dicts by column name) as a table of ``kind``."""
    return pd.DataFrame(rows, columns=columns(kind)) if rows else empty(kind)


def to_arrow(df: pd.DataFrame, kind: str) -> pa.Table:
    schema = _schema(kind)
    missing = [c for c in schema.names if c not in df.columns]
    if missing:
        raise TableError(f"{kind} table is missing column(s) {missing}")
    try:
        return pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise TableError(f"{kind} table does not fit its schema: {e}") from e


def write(df: pd.DataFrame, path: str | os.PathLike, kind: str) -> None:
    """Cast ``df`` to the schema of ``kind`` and write it atomically to ``path``
    (:func:`write_atomic`). Columns of the schema missing from an analysis or evaluation frame
    are written as nulls."""
    if kind in OPTIONAL_COLUMNS_OK:
        df = df.reindex(columns=_schema(kind).names)
    table = to_arrow(df, kind)
    write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def write_raw(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """A frame with no schema of ours (a hub dataset's split, columns as its source has them),
    written atomically as :func:`write` writes tables."""
    write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def write_atomic(path: str | os.PathLike, writer) -> None:
    """``writer(tmp)`` writes a temporary file beside ``path`` that is renamed into place
    once complete (a killed job never leaves a file that looks complete), with the
    permissions of any new file (the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


REBUILD = "delete it and rerun snakemake, which rebuilds it and what depends on it"


def read(path: str | os.PathLike, kind: str) -> pd.DataFrame:
    """Read a table and check it has the columns of ``kind`` (extra columns are kept). A file
    that is not Parquet, or not this table, raises a TableError that names it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{kind} table not found: {path}")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        reason = "empty file" if path.stat().st_size == 0 else str(e).splitlines()[0]
        raise TableError(f"{path} is not a readable Parquet {kind} table ({reason}): {REBUILD}") from None
    renamed = RENAMED.get(kind, {})
    table = table.rename_columns([renamed.get(c, c) for c in table.column_names])
    added = ADDED_COLUMNS.get(kind, ())
    missing = [c for c in _schema(kind).names if c not in table.column_names and c not in added]
    if missing:
        raise TableError(f"{path} is not a {kind} table: missing column(s) {missing}; {REBUILD}")
    out = table.to_pandas()
    for c in added:
        if c not in out:
            out[c] = pd.Series([None] * len(out), dtype=object)
    return out


def read_many(paths, kind: str) -> pd.DataFrame:
    frames = [read(p, kind) for p in paths]
    return pd.concat(frames, ignore_index=True) if frames else empty(kind)


def _schema(kind: str) -> pa.Schema:
    try:
        return SCHEMAS[kind]
    except KeyError:
        raise TableError(f"unknown table kind {kind!r}; known: {sorted(SCHEMAS)}") from None
