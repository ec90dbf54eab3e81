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
What does not depend on the method (the prompt splits, the initial pool with its SFT, and
the evaluation of that pool) is built once per seed, in ``results/<study>/_init-seed<s>/``,
and shared by every experiment of the seed (per member: a pool-size experiment shares the
members it has). A config without ``study`` is one experiment, its own initial pool.

Pure: no model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field

from .settings import Settings, SettingsError, as_data


def merge(base: dict, extra: dict) -> dict:
    """``extra`` deep-merged over ``base`` (lists replace), as Snakemake merges configs."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


# what the initial pool, the prompt splits and their evaluation depend on (not the members
# list: experiments of a seed share every member they have in common)
INIT_KEYS = (
    "seed",
    "device",
    "dtype",
    "system_prompt",
    "backend",
    "vllm",
    "base_models",
    "sft",
    "lora",
    "evaluation",
)


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

    @property
    def runs(self) -> dict[str, Settings]:
        """Every run folder the DAG writes: experiments and shared initial pools."""
        return {**self.inits, **self.experiments}


def _init_key(settings: Settings) -> str:
    data = as_data(settings)
    relevant = {k: data[k] for k in INIT_KEYS}
    relevant["split"] = settings.prompts.split_keys()
    return hashlib.sha1(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:10]


def expand(config: dict) -> Study:
    """The study of a config (a plain experiment config is a study of one)."""
    config = dict(config)
    section = config.pop("study", None)
    if not section:
        s = Settings.from_config(config)
        return Study(
            s.experiment,
            {s.experiment: s},
            {s.experiment: s.experiment},
            {},
            False,
            {s.experiment: config},
            {s.experiment: s.experiment},
        )
    name = config["experiment"]
    seeds = section.get("seeds") or [config.get("seed", 42)]
    overlays = section.get("experiments") or {}
    if not overlays:
        raise SettingsError("study.experiments: list at least one experiment (name: overlay)")
    experiments: dict[str, Settings] = {}
    configs: dict[str, dict] = {}
    labels: dict[str, str] = {}
    for exp_name, overlay in overlays.items():
        if "experiment" in (overlay or {}) or "study" in (overlay or {}):
            raise SettingsError(f"study.experiments.{exp_name}: an overlay cannot set experiment or study")
        for seed in seeds:
            merged = merge(
                config, {**(overlay or {}), "seed": seed, "experiment": f"{name}/{exp_name}-seed{seed}"}
            )
            configs[merged["experiment"]] = {**merged, "experiment": name}  # as the schema checks it
            labels[merged["experiment"]] = exp_name
            try:
                experiments[merged["experiment"]] = Settings.from_config(merged)
            except SettingsError as e:
                raise SettingsError(f"study.experiments.{exp_name} (seed {seed}): {e}") from e
    # one shared initial pool per seed and init-relevant settings; members joined by name
    groups: dict[str, list[str]] = {}
    for exp_id, s in experiments.items():
        groups.setdefault(_init_key(s), []).append(exp_id)
    init_of, inits = {}, {}
    seeds_seen: dict[int, int] = {}
    for ids in groups.values():
        first = experiments[ids[0]]
        k = seeds_seen[first.seed] = seeds_seen.get(first.seed, 0) + 1
        init_id = f"{name}/_init-seed{first.seed}" + (f"-{k}" if k > 1 else "")
        members: dict[str, object] = {}
        for exp_id in ids:
            for m in experiments[exp_id].members:
                if members.setdefault(m.name, m) != m:
                    raise SettingsError(
                        f"study: member {m.name} differs between experiments ({members[m.name]} vs {m}); "
                        "give different members different names"
                    )
            init_of[exp_id] = init_id
        inits[init_id] = dataclasses.replace(first, experiment=init_id, members=tuple(members.values()))
    return Study(name, experiments, init_of, inits, True, configs, labels)
