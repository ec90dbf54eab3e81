"""Where every artifact of a run lives: the one owner of the results layout.

A run (one experiment, or a study's shared initial pool) is a folder ``results/<run>/``::

    data/{alignment,validation,test}.parquet        prompt splits
    iter_0/state.parquet                            the initial reputations
    iter_<c>/members/<member>/member.json           checkpoint c of a member (0: initial pool)
        .../adapter/, training_log.parquet          when sparta trained it
    iter_<t>/round_<r>/duels.parquet                a round: duels, state, history, preferences
    iter_<t>/round_<r>/{responses,judgments}/<member>.parquet
    iter_<t>/preferences.parquet                    every pair of iteration t
    evaluation/checkpoint_<c>/<member>.parquet      a member's evaluation at checkpoint c
    evaluation/{scores,selection}.parquet, selection.tsv
    analysis/<table>.parquet, analysis/pair_accuracy/iter_<t>.parquet
    report/<figure>.png, settings.yaml, reputation_history.parquet, final_state.parquet
    logs/..., benchmarks/...

Shared by every run: ``results/_bases/``, ``results/_hub/`` and ``results/_data/`` (below).

Every function takes the run id and numbers, and returns the path as a string relative to the
workflow's working directory; given wildcards (``"{exp}"``, ``"{t}"``) it returns the rule's
pattern, so rules declare their outputs through the same functions. :class:`RunFolder` reads
a run folder on disk (``sparta`` commands, export). Pure: no heavy import.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = "results"
"""The results root of the workflow, relative to its working directory: every output is under it."""

SPLITS = ("alignment", "validation", "test")
ROUND_TABLES = ("duels", "state", "history", "preferences")
"""Tables of one round, one file each."""
MEMBER_TABLES = ("responses", "judgments")
"""Tables of one round, one file per member (or judge)."""
TRAINED_FILES = ("adapter/adapter_config.json", "adapter/adapter_model.safetensors", "training_log.parquet")
"""What a checkpoint sparta trained holds beside its member.json."""

SETTINGS = "settings.yaml"
"""Every setting of a run, defaults filled in (rule record_settings)."""
SELECTION = "selection.parquet"
SCORES = "scores.parquet"
"""The evaluation tables of a run (:func:`evaluation_file`)."""
COMPARISON = "comparison.parquet"
COST = "cost.parquet"
"""A study's comparison and inference cost (:func:`study_file`)."""

_ITERATION = re.compile(r"iter_(\d+)")


def iteration_name(t) -> str:
    """The folder name of iteration (checkpoint) ``t``; ``"*"`` gives the glob."""
    return f"iter_{t}"


def round_name(r) -> str:
    return f"round_{r}"


# --- one run, as strings (rules, scripts) ------------------------------------------------------


def run_dir(run) -> str:
    return f"{RESULTS}/{run}"


def run_file(run, name: str) -> str:
    """A file at the top of a run: settings.yaml, reputation_history.parquet, final_state.parquet."""
    return f"{run_dir(run)}/{name}"


def data(run, split) -> str:
    """A prompt split (made in the run holding a run's initial pool)."""
    return f"{run_dir(run)}/data/{split}.parquet"


def iteration_dir(run, t) -> str:
    return f"{run_dir(run)}/{iteration_name(t)}"


def round_table(run, t, r, name: str) -> str:
    """One of :data:`ROUND_TABLES` of round r of iteration t."""
    return f"{iteration_dir(run, t)}/{round_name(r)}/{name}.parquet"


def member_table(run, t, r, kind: str, member) -> str:
    """One member's (or judge's) table of a round: ``kind`` one of :data:`MEMBER_TABLES`."""
    return f"{iteration_dir(run, t)}/{round_name(r)}/{kind}/{member}.parquet"


def initial_state(run) -> str:
    """The reputations every member starts with."""
    return f"{iteration_dir(run, 0)}/state.parquet"


def preferences(run, t) -> str:
    """Every preference pair of iteration t (what the members train on)."""
    return f"{iteration_dir(run, t)}/preferences.parquet"


def member_json(run, c, member) -> str:
    """Checkpoint c of a member (0: the initial pool)."""
    return member_file(run, c, member, "member.json")


def member_file(run, c, member, name: str) -> str:
    """A file of a member checkpoint: its member.json or one of :data:`TRAINED_FILES`."""
    return f"{iteration_dir(run, c)}/members/{member}/{name}"


def evaluation(run, c, member) -> str:
    """A member's evaluation at checkpoint c."""
    return f"{run_dir(run)}/evaluation/checkpoint_{c}/{member}.parquet"


def evaluation_file(run, name: str) -> str:
    """The evaluation tables of a run: scores.parquet, selection.parquet, selection.tsv."""
    return f"{run_dir(run)}/evaluation/{name}"


def analysis(run, name: str) -> str:
    return f"{run_dir(run)}/analysis/{name}.parquet"


def pair_accuracy(run, t) -> str:
    """Held-out preference accuracy of iteration t's DPO."""
    return f"{run_dir(run)}/analysis/pair_accuracy/{iteration_name(t)}.parquet"


def figure(run, name: str) -> str:
    return f"{run_dir(run)}/report/{name}.png"


def study_file(study, name: str) -> str:
    """A file of a study's comparison: comparison.tsv, comparison.parquet, cost.parquet, ..."""
    return f"{run_dir(study)}/{name}"


def base_dir(base) -> str:
    """The safetensors folder a GGUF base is converted to, shared by every run."""
    return f"{RESULTS}/_bases/{base}"


def hub_manifest() -> str:
    """The hub ids of every run, downloaded into the Hugging Face cache (rule hub_download):
    id, requested revision, resolved commit, files, size (sparta.hub)."""
    return f"{RESULTS}/_hub/manifest.parquet"


def hub_log() -> str:
    return f"{RESULTS}/_hub/logs/hub_download.log"


def hub_dataset(key) -> str:
    """One (config, split) of a hub dataset as Parquet (rule hub_dataset; ``key`` from
    :func:`sparta.hub.dataset_key`), shared by every run that reads it."""
    return f"{RESULTS}/_data/{key}.parquet"


def hub_dataset_log(key) -> str:
    return f"{RESULTS}/_data/logs/{key}.log"


def base_log(base, benchmark: bool = False) -> str:
    """The log (or benchmark) of a base's conversion."""
    return f"{RESULTS}/_bases/logs/convert_{base}" + (".benchmark.tsv" if benchmark else ".log")


def _job_file(run, kind: str, name: str, ext: str, t=None, r=None, *, where: str | None = None) -> str:
    folders = [where, None if t is None else iteration_name(t), None if r is None else round_name(r)]
    return "/".join([run_dir(run), kind, *(f for f in folders if f is not None), f"{name}.{ext}"])


def log(run, name: str, t=None, r=None, where: str | None = None) -> str:
    """The log of a job: ``logs/[where/][iter_<t>/][round_<r>/]<name>.log``."""
    return _job_file(run, "logs", name, "log", t, r, where=where)


def benchmark(run, name: str, t=None, r=None, where: str | None = None) -> str:
    """The benchmark of a job, laid out as its log."""
    return _job_file(run, "benchmarks", name, "tsv", t, r, where=where)


def checkpoint_where(c) -> str:
    """The folder of the logs of a checkpoint's evaluation (under logs/evaluation/)."""
    return f"evaluation/checkpoint_{c}"


def pair_accuracy_name(t) -> str:
    """Log / benchmark name of the held-out accuracy of iteration t (under analysis/)."""
    return f"pair_accuracy_{iteration_name(t)}"


def tensorboard(run, t) -> str:
    return f"{run_dir(run)}/logs/tensorboard/{iteration_name(t)}"


def tracker_run(run, t) -> str:
    """A trainer's run name in an experiment tracker."""
    return f"{run}/{iteration_name(t)}"


# --- a run folder on disk (sparta commands, export) --------------------------------------------


def iteration_of(folder: str | Path) -> int | None:
    """The iteration of an ``iter_<t>`` folder; None for any other folder."""
    m = _ITERATION.fullmatch(Path(folder).name)
    return int(m.group(1)) if m else None


def rounds_of(iteration: str | Path) -> list[Path]:
    """The round folders of an iteration folder (started rounds, in name order)."""
    return sorted(Path(iteration).glob(round_name("*")))


def round_files(iteration: str | Path, name: str) -> list[Path]:
    """A table of every round of an iteration folder: ``duels.parquet``, or
    ``judgments/*.parquet`` for every member's."""
    return sorted(Path(iteration).glob(f"{round_name('*')}/{name}"))


def run_folders(results: str | Path = RESULTS) -> list[Path]:
    """Every run folder under a results folder."""
    return [p.parent for p in Path(results).glob(f"*/{iteration_name(0)}")]


class RunFolder:
    """A run folder on disk, read through the layout above."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def at(self, where, *args) -> Path:
        """The path that a layout function above gives a run, in this folder:
        ``at(evaluation_file, SELECTION)``, ``at(run_file, SETTINGS)``."""
        return self.path / Path(where("x", *args)).relative_to(run_dir("x"))

    @property
    def settings(self) -> Path:
        return self.at(run_file, SETTINGS)

    def is_run(self) -> bool:
        """Whether the folder is a run's: its initial pool (``iter_0/``) is there."""
        return self.iteration(0).is_dir()

    def iteration(self, t) -> Path:
        return self.path / iteration_name(t)

    def round(self, t, r) -> Path:
        return self.iteration(t) / round_name(r)

    def rounds(self) -> list[Path]:
        """Every started round of every iteration."""
        return sorted(self.path.glob(f"{iteration_name('*')}/{round_name('*')}"))

    def states(self) -> list[Path]:
        """The initial state, then every round's, in name order (existing ones only)."""
        first = self.at(initial_state)
        states = sorted(self.path.glob(f"{iteration_name('*')}/{round_name('*')}/state.parquet"))
        return [p for p in [first, *states] if p.exists()]

    def member_json(self, c, member) -> Path:
        return self.at(member_json, c, member)

    def checkpoints(self, member) -> list[int]:
        """The checkpoints of a member present in the folder, in order."""
        found = self.path.glob(f"{iteration_name('*')}/members/{member}/member.json")
        return sorted(t for p in found if (t := iteration_of(p.parent.parent.parent)) is not None)
