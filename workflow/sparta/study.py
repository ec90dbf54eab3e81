"""Several experiments in one DAG: a study.

A study config is an experiment config (the base of every experiment) with a ``study``
section listing experiments as overlays of it and the seeds to run each with::

    experiment: small            # the study's name: results/small/<experiment>-seed<s>/
    study:
      seeds: [1, 2]
      experiments:
        sparta: {}
        self_rewarding: {method: self_rewarding}
        no_updates: {reputation: {updates: false}}

Every (experiment, seed) is a run of its own under ``results/<study>/<experiment>-seed<s>/``.
What does not depend on the method (:data:`INIT_KEYS`: the prompt splits, the initial pool
with its SFT, and its evaluation) is built once per seed in ``results/<study>/_init-seed<s>/``
and shared by every experiment of the seed: a study compares methods on one initial pool per
seed (:func:`_initial_pools` says when a seed would need two).

Pure: no model.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .fields import shared_by, subset
from .settings import ConfigError, Settings, SettingsError, as_data


def merge(base: dict, extra: dict) -> dict:
    """``extra`` deep-merged over ``base`` (lists replace), as Snakemake merges configs."""
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if both else value
    return out


# what the initial pool and the prompt splits depend on (not the members list: experiments of
# a seed share every member they have in common; not the base models, joined by name; not
# evaluation.*: the pool's evaluation must agree where it matters, see _shared_init)
INIT_KEYS = shared_by(Settings, "pool")  # seed, device, dtype, system_prompt, backend, vllm, sft, lora
# prompt settings that do not change the split: the reference answers ride along in the
# shared prompt tables (every experiment that names a reference column must name the same)
SHARED_PROMPT_KEYS = ("reference_column",)
# evaluation settings that change the initial pool's scores: one value per shared pool
SCORED_EVALUATION_KEYS = ("tasks", "judge")


# settings of the whole study, never of one experiment (one DAG, one executor, one device)
STUDY_WIDE = shared_by(Settings, "study")  # device, backend, fanout, dpo_fanout, vllm, resources


def study_problems(config: dict) -> list[str]:
    """What makes a study config's ``study`` section unusable, each naming its key (empty for a
    config without one): no experiment, a seed listed twice, an overlay that sets what only the
    study sets (its seeds, its name, a study-wide key)."""
    if "study" not in config:
        return []
    section = config["study"]
    if not isinstance(section, dict):
        return []  # the schema says so
    problems = []
    overlays = section.get("experiments")
    if not overlays:
        problems.append(
            "study.experiments: list at least one experiment as name: overlay (e.g. sparta: {}); "
            "without experiments, remove study: for a single run"
        )
    if "tasks" in section and not section["tasks"]:
        problems.append(
            "study.tasks: list at least one task as name: overlay (its prompts and evaluation.tasks), "
            "or remove study.tasks: every experiment then runs on the config's prompts"
        )
    seeds = section.get("seeds") or []
    repeated = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
    if repeated:
        problems.append(
            f"study.seeds: {', '.join(map(str, repeated))} listed more than once; each seed is one run "
            "of every experiment: list each once"
        )
    for axis in ("experiments", "tasks"):
        found = section.get(axis)
        for name, overlay in found.items() if isinstance(found, dict) else ():
            if not isinstance(overlay, dict):
                continue
            for key in overlay:
                if key in ("experiment", "study"):
                    problems.append(f"study.{axis}.{name}.{key}: an overlay cannot set experiment or study")
                elif key == "seed":
                    problems.append(
                        f"study.{axis}.{name}.seed: an overlay cannot set seed; every experiment runs "
                        "with each of study.seeds: list the seeds there"
                    )
                elif key in STUDY_WIDE:
                    problems.append(
                        f"study.{axis}.{name}.{key}: {key} is one setting of the whole study; set it in "
                        "the study's config, not in an overlay"
                    )
    tasks = section.get("tasks") if isinstance(section.get("tasks"), dict) else {}
    problems += _subset_problems(section.get("experiment_tasks"), overlays, tasks)
    clash = sorted(set(tasks) & set(overlays or {})) if isinstance(overlays, dict) else []
    if clash:
        problems.append(
            f"study.tasks: {', '.join(clash)} is also an experiment's name; give tasks and experiments "
            "different names (a run is named task/experiment-seed)"
        )
    return problems


def _subset_problems(subsets, overlays, tasks: dict) -> list[str]:
    """What is wrong with ``study.experiment_tasks`` (experiment -> the tasks it runs on)."""
    if not isinstance(subsets, dict):
        return []  # absent, or the schema says what is wrong
    if not tasks:
        return [
            "study.experiment_tasks: names the tasks an experiment runs on, of study.tasks; add "
            "study.tasks or remove study.experiment_tasks"
        ]
    problems = []
    for name, listed in subsets.items():
        where = f"study.experiment_tasks.{name}"
        if not isinstance(overlays, dict) or name not in overlays:
            known = ", ".join(overlays or {}) if isinstance(overlays, dict) else "none"
            problems.append(f"{where}: no experiment {name} in study.experiments (experiments: {known})")
        if listed is not None and not isinstance(listed, list):
            continue  # the schema says what is wrong
        unknown = [t for t in listed or () if t not in tasks]
        if unknown:
            problems.append(
                f"{where}: {', '.join(map(str, unknown))} not in study.tasks (tasks: {', '.join(tasks)}); "
                "list tasks of study.tasks, or add the task there"
            )
        elif not listed:
            problems.append(
                f"{where}: list at least one task, or remove the experiment from study.experiments"
            )
    return problems


@dataclass(frozen=True)
class RunSpec:
    """One run of a study: its experiment (overlay name), task (None without study.tasks),
    seed, and config (the base, the task's overlay, then the experiment's, and the seed)."""

    experiment: str
    task: str | None
    seed: int
    config: dict

    @property
    def label(self) -> str:
        """The run's name inside the study: ``[<task>/]<experiment>-seed<s>``."""
        return f"{self.task}/" * (self.task is not None) + f"{self.experiment}-seed{self.seed}"


def run_configs(config: dict) -> list[RunSpec]:
    """Every run of a study config, each with its merged config (the schema checks each):
    experiments x seeds, and x tasks with study.tasks (an experiment of study.experiment_tasks
    on its tasks only)."""
    section = dict(config.get("study") or {})
    config = {k: v for k, v in config.items() if k != "study"}
    seeds = section.get("seeds") or [config.get("seed", 42)]
    tasks = section.get("tasks") or {None: {}}
    only = section.get("experiment_tasks") or {}  # experiment -> its tasks; absent: every task
    return [
        RunSpec(name, task, seed, merge(merge(config, tasks[task] or {}), {**(overlay or {}), "seed": seed}))
        for task in tasks
        for name, overlay in (section.get("experiments") or {}).items()
        if name not in only or task in only[name]
        for seed in seeds
    ]


@dataclass(frozen=True)
class Study:
    """The experiments of one config: id -> settings, and for each the id of the run that
    holds its initial pool, prompt splits and initial evaluation (itself when not shared)."""

    name: str
    experiments: dict[str, Settings]
    init_of: dict[str, str]
    inits: dict[str, Settings]
    is_study: bool
    configs: dict[str, dict]
    """Each experiment's config: the base with its overlay merged in."""
    labels: dict[str, str] = field(default_factory=dict)
    """Each experiment's name in the study (its overlay key), without the seed."""
    notes: tuple[str, ...] = ()
    """What the checks found that a run can go on with, told once at its start."""
    tasks: dict[str, str | None] = field(default_factory=dict)
    """Each experiment's task (study.tasks; None without)."""
    pools: dict[str, str] = field(default_factory=dict)
    """Initial-pool run -> the run holding its initial members, where another run's (the tasks
    of a seed share one pool); absent: itself."""

    def pool_of(self, run: str) -> str:
        """The run whose folder holds the initial members (checkpoint 0) ``run`` uses."""
        init = self.init_of.get(run, run)
        return self.pools.get(init, init)

    @property
    def runs(self) -> dict[str, Settings]:
        """Every run folder the DAG writes: experiments and shared initial pools."""
        return {**self.inits, **self.experiments}

    @property
    def settings(self) -> StudySettings:
        """The settings of the whole study (:data:`STUDY_WIDE`), read from its first experiment
        (the config's checks make them the same in every experiment)."""
        first = next(iter(self.experiments.values()))
        values = {f.name: getattr(first, f.name) for f in dataclasses.fields(StudySettings)}
        return StudySettings(**{**values, "dpo_fanout": first.dpo_fanout or first.fanout})


StudySettings = subset(
    Settings,
    (*STUDY_WIDE, "dtype"),
    "StudySettings",
    "The settings of the whole study, never of one experiment (:data:`STUDY_WIDE`: one DAG, one "
    "executor, one device), as the workflow's rules use them, declared in :class:`Settings`; "
    "``dpo_fanout`` resolved (``fanout`` when unset) and ``dtype`` the first experiment's (what "
    "the check of the local device trains in).",
)


def _init_data(settings: Settings) -> dict:
    """The settings the initial pool and the prompt splits are made from."""
    data = as_data(settings)
    prompts = {k: v for k, v in settings.prompts.split_keys().items() if k not in SHARED_PROMPT_KEYS}
    return {**{k: data[k] for k in INIT_KEYS}, "prompts": prompts}


def _differences(a: Settings, b: Settings) -> list[str]:
    """The init keys (dotted for prompts) whose values differ between two experiments."""
    da, db = _init_data(a), _init_data(b)
    out = [k for k in INIT_KEYS if da[k] != db[k]]
    out += [f"prompts.{k}" for k in da["prompts"] if da["prompts"][k] != db["prompts"].get(k)]
    return out


def _shared_init(init_id: str, ids: list[str], experiments: dict[str, Settings], labels) -> Settings:
    """The settings of the run holding the initial pool shared by ``ids``: the first one's,
    with every member and base model of any of them, the reference column any of them names,
    and their (common) evaluation of the pool; tested whole (``evaluation.test: all``) when
    some of them use only part of it (pool sizes), so each one's best init has test scores."""
    first = experiments[ids[0]]
    members, bases, base_of = {}, {}, {}  # name -> member, name -> base model, name -> first user
    for exp_id in ids:
        s = experiments[exp_id]
        for m in s.members:
            if members.setdefault(m.name, m) != m:
                raise SettingsError(
                    f"study: member {m.name} differs between experiments ({members[m.name]} vs {m}); "
                    "give different members different names"
                )
        for name, base in s.base_models.items():
            if bases.setdefault(name, base) != base:
                raise SettingsError(
                    f"study: base model {name} differs between experiments {labels[base_of[name]]} and "
                    f"{labels[exp_id]} ({bases[name]} vs {base}); give different base models different names"
                )
            base_of.setdefault(name, exp_id)
    references = {experiments[e].prompts.reference_column for e in ids} - {None}
    if len(references) > 1:
        raise SettingsError(
            f"study (seed {first.seed}): prompts.reference_column differs between experiments "
            f"({', '.join(sorted(references))}); the shared prompt tables hold one reference answer "
            "per prompt"
        )
    for key in SCORED_EVALUATION_KEYS:
        values = {e: getattr(experiments[e].evaluation, key) for e in ids}
        other = next((e for e in ids if values[e] != values[ids[0]]), None)
        if other is not None:
            raise SettingsError(
                f"study (seed {first.seed}): evaluation.{key} differs between experiments "
                f"{labels[ids[0]]} and {labels[other]}, which share the initial pool and its evaluation; "
                "a comparison scores every experiment on the same evaluation"
            )
    evaluation = dataclasses.replace(
        first.evaluation, enabled=any(experiments[e].evaluation.enabled for e in ids)
    )
    if any(set(experiments[e].member_names) != set(members) for e in ids):
        # evaluation.test: selected would test only the best of all these members on validation;
        # a pool-size experiment's own best init (the best of its members) needs test rows too,
        # whichever it is: the shared initial pool is tested whole (checkpoint 0 only)
        evaluation = dataclasses.replace(evaluation, test="all")
    prompts = dataclasses.replace(first.prompts, reference_column=next(iter(references), None))
    return dataclasses.replace(
        first,
        experiment=init_id,
        members=tuple(members.values()),
        base_models=bases,
        prompts=prompts,
        evaluation=evaluation,
    )


def expand(config: dict) -> Study:
    """The study of a config (a plain experiment config is a study of one)."""
    problems = study_problems(config)
    if problems:
        raise SettingsError("; ".join(problems))
    config = dict(config)
    section = config.pop("study", None)
    if section is None:
        s = Settings.from_config(config)
        e = s.experiment
        return Study(e, {e: s}, {e: e}, {}, False, {e: config}, {e: e})
    name = config["experiment"]
    overlays = section.get("experiments") or {}
    experiments: dict[str, Settings] = {}
    configs, labels, task_of = {}, {}, {}  # as the Study's fields
    for run in run_configs({**config, "study": section}):
        exp_id = f"{name}/{run.label}"
        configs[exp_id] = {**run.config, "experiment": name}  # as the schema checks it
        labels[exp_id], task_of[exp_id] = run.experiment, run.task
        try:
            experiments[exp_id] = Settings.from_config({**run.config, "experiment": exp_id})
        except SettingsError as e:
            where = f"study.experiments.{run.experiment}" + (f", task {run.task}" if run.task else "")
            raise SettingsError(f"{where} (seed {run.seed}): {e}") from e
    init_of, inits = _initial_pools(name, experiments, labels, task_of, overlays)
    return Study(name, experiments, init_of, inits, True, configs, labels, tasks=task_of, pools=_pools(inits))


def _initial_pools(
    name: str,
    experiments: dict[str, Settings],
    labels: dict[str, str],
    task_of: dict[str, str | None],
    overlays: dict,
) -> tuple[dict[str, str], dict[str, Settings]]:
    """One shared initial pool per seed (and task) and init-relevant settings, members joined
    by name: each experiment's initial-pool run, and the settings of each such run."""
    sets_members = {exp_id: "members" in (overlays[labels[exp_id]] or {}) for exp_id in experiments}
    groups: dict[tuple, list[str]] = {}
    for exp_id, s in experiments.items():
        init = json.dumps(_init_data(s), sort_keys=True)  # what the pool is made from
        groups.setdefault((s.seed, task_of[exp_id], init), []).append(exp_id)
    init_of, inits = {}, {}
    for seed, task in dict.fromkeys((s.seed, task_of[e]) for e, s in experiments.items()):
        keys = [k for k in groups if k[:2] == (seed, task)]
        # the seed's pool: the group of the experiments that keep the base config's members
        main = [k for k in keys if not all(sets_members[e] for e in groups[k])]
        if len(main) > 1:
            a, b = groups[main[0]][0], groups[main[1]][0]
            differ = ", ".join(_differences(experiments[a], experiments[b]))
            on = f" on task {task}" if task else ""
            raise SettingsError(
                f"study: experiments {labels[a]} and {labels[b]} (seed {seed}{on}) would need two different "
                f"initial pools ({differ} differ); a study shares one initial pool per seed: give them "
                "the same values, or run them as studies of their own (only a pool-size experiment, "
                "one that sets members, may have a pool of its own)"
            )
        for k, key in enumerate(main + [k for k in keys if k not in main], start=1):
            ids = groups[key]
            folder = f"{name}/{task}" if task else name
            init_id = f"{folder}/_init-seed{seed}" + (f"-{k}" if k > 1 else "")
            inits[init_id] = _shared_init(init_id, ids, experiments, labels)
            init_of.update(dict.fromkeys(ids, init_id))
    return init_of, inits


def _pools(inits: dict[str, Settings]) -> dict[str, str]:
    """Initial-pool run -> the run whose initial members it uses: the first one of the same
    seed, pool settings and members (the tasks of a study share one pool per seed: its SFT runs
    once; the prompt splits and the pool's evaluation stay per task). Only entries that differ."""
    first, pools = {}, {}  # pool settings -> its first run; the runs that use another's
    for init_id, s in inits.items():
        data = as_data(s)
        pool = {k: data[k] for k in INIT_KEYS}
        pool.update(members=data["members"], bases=data["base_models"])
        owner = first.setdefault(json.dumps(pool, sort_keys=True), init_id)
        if owner != init_id:
            pools[init_id] = owner
    return pools


def local_cuda(settings: StudySettings) -> bool:
    """Whether model jobs on this machine run on a CUDA GPU (device cuda, or auto with an
    NVIDIA driver here), without importing torch in snakemake's process."""
    if settings.device != "auto":
        return settings.device == "cuda"
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def check_local_device(settings: StudySettings) -> None:
    """Before a run whose jobs run on this machine: device cuda needs a CUDA GPU here, and the
    run's dtype must be one this machine trains in (see train.trainer_precision)."""
    if settings.device != "cuda" and settings.dtype in ("auto", "float32"):
        return  # fp32 on a CPU, or auto's choice for the device found: trains anywhere
    import torch

    if settings.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device: cuda, but this machine has no CUDA GPU for its local jobs: set device: auto "
            "(or cpu), or run on a GPU node / through a cluster executor (--profile slurm)"
        )
    from .models import pick_device, pick_dtype
    from .train import PrecisionError, trainer_precision

    device = pick_device(settings.device)
    try:
        trainer_precision(device, pick_dtype(settings.dtype, device))
    except PrecisionError as e:
        raise ConfigError(f"dtype: {settings.dtype}: {e}; {e.hint}") from None
