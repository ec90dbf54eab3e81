# Validation, wildcard constraints and input functions; no rules.
import os
import re

from snakemake.utils import validate

from sparta import config as sparta_config


validate(config, schema="../workflow/schemas/config.schema.yaml")
sparta_config.check(config, ".")  # paths are relative to the working directory, as in jobs

EXP = config["experiment"]
MEMBERS = [m["name"] for m in config["members"]]
MEMBER_SPECS = {m["name"]: m for m in config["members"]}
SFT_MEMBERS = [m["name"] for m in config["members"] if m.get("sft_domain")]
ITERATIONS = list(range(1, config["iterations"] + 1))
ROUNDS = list(range(config["matchmaking"]["rounds_per_iteration"]))
LAST_ROUND = ROUNDS[-1]
GGUF_BASES = [k for k, v in config["base_models"].items() if "gguf_file" in v]
FANOUT = config["fanout"]  # member: one job per member / judge; pool: one job serves all
# conda env of combat, judging and evaluation (DPO and SFT always use envs/train.yaml)
MODEL_ENV = "../envs/vllm.yaml" if config["backend"] == "vllm" else "../envs/train.yaml"


def alternatives(names):
    """A wildcard regex matching exactly these names (nothing when empty)."""
    return "|".join(map(re.escape, names)) or "(?!)"


wildcard_constraints:
    exp=re.escape(EXP),
    t=r"\d+",
    r=r"\d+",
    member=alternatives(MEMBERS),
    judge=alternatives(MEMBERS),
    base=alternatives(GGUF_BASES),
    split="alignment|validation|test",


def base_folder(member):
    return sparta_config.base_folder(config, MEMBER_SPECS[member]["base"])


def base_marker(wildcards):
    """The config.json of a member's base: ties a member to the rule that builds its base."""
    return f"{base_folder(wildcards.member)}/config.json"


def member_json(wildcards, member=None, t=None):
    """member.json of a member as it enters iteration t (the output of iteration t - 1)."""
    t = int(wildcards.t) if t is None else t
    member = member or getattr(wildcards, "member", None) or wildcards.judge
    return f"results/{EXP}/iter_{t - 1}/members/{member}/member.json"


def previous_state(wildcards):
    """The reputation state a round starts from: the previous round's, or the previous
    iteration's last round, or the initial state."""
    t, r = int(wildcards.t), int(wildcards.r)
    if r > 0:
        return f"results/{EXP}/iter_{t}/round_{r - 1}/state.parquet"
    if t > 1:
        return f"results/{EXP}/iter_{t - 1}/round_{LAST_ROUND}/state.parquet"
    return f"results/{EXP}/iter_0/state.parquet"


def round_responses(wildcards):
    return expand(
        "results/{exp}/iter_{t}/round_{r}/responses/{member}.parquet",
        exp=EXP, t=wildcards.t, r=wildcards.r, member=MEMBERS,
    )


def round_judgments(wildcards):
    return expand(
        "results/{exp}/iter_{t}/round_{r}/judgments/{judge}.parquet",
        exp=EXP, t=wildcards.t, r=wildcards.r, judge=MEMBERS,
    )


def iteration_preferences(wildcards):
    return expand(
        "results/{exp}/iter_{t}/round_{r}/preferences.parquet", exp=EXP, t=wildcards.t, r=ROUNDS
    )


def iteration_states(wildcards):
    return expand(
        "results/{exp}/iter_{t}/round_{r}/state.parquet", exp=EXP, t=wildcards.t, r=ROUNDS
    )


def all_histories(wildcards):
    return expand(
        "results/{exp}/iter_{t}/round_{r}/history.parquet", exp=EXP, t=ITERATIONS, r=ROUNDS
    )


def sft_data(wildcards):
    domain = MEMBER_SPECS[wildcards.member].get("sft_domain")
    return f"{config['sft']['data_dir']}/{domain}.jsonl" if domain else []


def evaluation_task_files(wildcards):
    return [t["file"] for t in config["evaluation"]["tasks"] if t.get("source", "file") == "file"]


def all_evaluations(wildcards):
    return expand(
        "results/{exp}/evaluation/checkpoint_{t}/{member}.parquet",
        exp=EXP, t=[0, *ITERATIONS], member=MEMBERS,
    )


def optional_evaluation(wildcards):
    """The evaluation scores when evaluation is on; analyses and plots work without them."""
    if config["evaluation"]["enabled"]:
        return f"results/{EXP}/evaluation/scores.parquet"
    return []


def all_round_tables(wildcards):
    rounds = expand("results/{exp}/iter_{t}/round_{r}", exp=EXP, t=ITERATIONS, r=ROUNDS)
    return [
        *[f"{r}/duels.parquet" for r in rounds],
        *[f"{r}/state.parquet" for r in rounds],
        *all_judgments(wildcards),
        *[f"{r}/responses/{m}.parquet" for r in rounds for m in MEMBERS],
    ]


def all_judgments(wildcards):
    rounds = expand("results/{exp}/iter_{t}/round_{r}", exp=EXP, t=ITERATIONS, r=ROUNDS)
    return [f"{r}/judgments/{m}.parquet" for r in rounds for m in MEMBERS]


def final_outputs():
    report_files = [
        f"results/{EXP}/report/{name}.png"
        for name in ("reputation", "win_matrix", "judge_scores", "label_accuracy", "diversity", "evaluation")
    ]
    evaluation = [f"results/{EXP}/evaluation/selection.tsv"] if config["evaluation"]["enabled"] else []
    return [
        *evaluation,
        *(report_files if config["analysis"]["enabled"] else []),
        f"results/{EXP}/reputation_history.parquet",
        f"results/{EXP}/final_state.parquet",
        *expand("results/{exp}/iter_{t}/preferences.parquet", exp=EXP, t=ITERATIONS),
        *expand(
            "results/{exp}/iter_{t}/members/{member}/member.json",
            exp=EXP, t=config["iterations"], member=MEMBERS,
        ),
    ]


# Fan-out: the same rule is one job per member (wildcard {member} / {judge}) or one job per
# round serving the whole pool; its outputs are the same per-member files either way.


def fanout_output(pattern, key="member"):
    """``pattern`` (with ``{key}``) as the output of one job: itself, or every member's file."""
    if FANOUT == "member":
        return pattern
    return expand(pattern, **{key: MEMBERS}, allow_missing=True)


def fanout_name(prefix, key="member"):
    """Log / benchmark name of one job: ``combat_{member}`` or ``combat_pool``."""
    return f"{prefix}_{{{key}}}" if FANOUT == "member" else f"{prefix}_pool"


def served(wildcards, key="member"):
    """The members one job serves."""
    return [getattr(wildcards, key)] if FANOUT == "member" else MEMBERS


def served_member_jsons(key, iteration_offset=1):
    """member.json of every member a job serves, as they enter iteration t (offset 1) or
    as checkpoint t (offset 0)."""

    def paths(wildcards):
        t = int(wildcards.t) + 1 - iteration_offset
        return [member_json(wildcards, member=m, t=t) for m in served(wildcards, key)]

    return paths


# Cluster resources of a model stage: config resources.<stage>, runtime and memory grow with
# the attempt so a retry after a Slurm time or memory limit asks for more. Account and
# partition come from the environment when set (or from the profile's default-resources).


def stage_resources(stage):
    r = config["resources"][stage]
    res = dict(
        gpu=r["gpu"],
        mem_mb=lambda wc, attempt: int(r["mem_mb"] * (1 + 0.5 * (attempt - 1))),
        runtime=lambda wc, attempt: r["runtime"] * attempt,
    )
    if r["gpu"]:
        res["cpus_per_gpu"] = r["cpus_per_gpu"]
    for key, var in (("slurm_account", "SPARTA_SLURM_ACCOUNT"), ("slurm_partition", "SPARTA_SLURM_PARTITION")):
        if os.environ.get(var):
            res[key] = os.environ[var]
    return res
