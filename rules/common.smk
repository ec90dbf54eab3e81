# Validation, settings, wildcard constraints and input functions; no rules.
import fcntl
import os
import re
import shutil
import sys

from snakemake.utils import validate

from sparta import config as sparta_config
from sparta.settings import Untracked, as_data, section_data


validate(config, schema="../workflow/schemas/config.schema.yaml", set_default=False)
# the typed settings of the run (sparta/settings.py holds every default), checked against the
# world before any job starts; paths are relative to the working directory, as in jobs
S = sparta_config.load(config, ".")



def clear_stale_locks():
    """Make `kill -9` then the same command a complete recovery: a snakemake process that dies
    hard leaves its directory locked. The main process holds a kernel lock on
    .snakemake/main.flock for its whole life (released by the kernel on any death); getting it
    proves no live snakemake works here, so leftover locks are stale and removed. Jobs that
    snakemake spawns never touch the locks."""
    if not workflow.is_main_process:
        return
    os.makedirs(".snakemake", exist_ok=True)
    fd = os.open(".snakemake/main.flock", os.O_RDWR | os.O_CREAT, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)  # a live snakemake runs here: its locks are real
        return
    os.set_inheritable(fd, False)
    if os.path.isdir(".snakemake/locks") and os.listdir(".snakemake/locks"):
        shutil.rmtree(".snakemake/locks")
        print("sparta: removed the locks of a snakemake that died (no live process held them)", file=sys.stderr)


clear_stale_locks()

EXP = S.experiment
MEMBERS = S.member_names
MEMBER_SPECS = {m.name: m for m in S.members}
SFT_MEMBERS = [m.name for m in S.members if m.sft_domain]
ITERATIONS = list(range(1, S.iterations + 1))
ROUNDS = list(range(S.matchmaking.rounds_per_iteration))
LAST_ROUND = ROUNDS[-1]
GGUF_BASES = [k for k, v in S.base_models.items() if v.gguf_file]
FANOUT = S.fanout  # member: one job per member / judge; pool: one job serves all
DPO_FANOUT = S.dpo_fanout or S.fanout
# conda env of combat, judging and evaluation (DPO and SFT always use envs/train.yaml)
MODEL_ENV = "../envs/vllm.yaml" if S.backend == "vllm" else "../envs/train.yaml"


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


def settings(*sections):
    """Rule params: the named settings sections as plain data (sparta.settings.SECTIONS), so
    a job reruns when, and only when, a setting it uses changes."""
    return section_data(S, *sections)


def tracking(wildcards):
    """How the trainers report (train.report_to): not compared for reruns."""
    t = getattr(wildcards, "t", "0")
    return Untracked(
        {
            "report_to": list(S.train.report_to),
            "project": S.train.project or EXP,
            "run_name": f"{EXP}/iter_{t}",
            "logging_dir": f"results/{EXP}/logs/tensorboard/iter_{t}",
        }
    )


def base_folder(member):
    return S.base_folder(MEMBER_SPECS[member].base)


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


def round_tables(name, key="member"):
    """Input function: a per-member table of one round (responses/<member>, judgments/<judge>)
    for every member."""

    def paths(wildcards):
        return [f"results/{EXP}/iter_{wildcards.t}/round_{wildcards.r}/{name}/{m}.parquet" for m in MEMBERS]

    return paths


def iteration_tables(name):
    """Input function: a table of every round of iteration t."""

    def paths(wildcards):
        return [f"results/{EXP}/iter_{wildcards.t}/round_{r}/{name}.parquet" for r in ROUNDS]

    return paths


def run_tables(name):
    """Every round's table ``name`` (e.g. duels.parquet, responses/<member>.parquet with
    {member}) over the whole run."""
    rounds = [f"results/{EXP}/iter_{t}/round_{r}" for t in ITERATIONS for r in ROUNDS]
    if "{member}" in name:
        return [f"{r}/{name.format(member=m)}" for r in rounds for m in MEMBERS]
    return [f"{r}/{name}" for r in rounds]


def sft_data(wildcards):
    domain = MEMBER_SPECS[wildcards.member].sft_domain
    return f"{S.sft.data_dir}/{domain}.jsonl" if domain else []


def evaluation_task_files(wildcards):
    return [t.file for t in S.evaluation.tasks if t.source == "file"]


def all_evaluations(wildcards):
    return [
        f"results/{EXP}/evaluation/checkpoint_{t}/{m}.parquet" for t in [0, *ITERATIONS] for m in MEMBERS
    ]


def all_training_logs(wildcards):
    """The trainer's log of every trained checkpoint (SFT of iteration 0, DPO after)."""
    return [
        f"results/{EXP}/iter_{t}/members/{m}/training_log.parquet"
        for t in [0, *ITERATIONS]
        for m in MEMBERS
        if t > 0 or MEMBER_SPECS[m].sft_domain
    ]


def optional_evaluation(wildcards):
    """The evaluation scores when evaluation is on; analyses and plots work without them."""
    return f"results/{EXP}/evaluation/scores.parquet" if S.evaluation.enabled else []


REPORT_FIGURES = (
    "reputation",
    "win_matrix",
    "judge_scores",
    "label_accuracy",
    "diversity",
    "reward_hacking",
    "training",
    "evaluation",
)


ANALYSIS_TABLES = (
    "diversity",
    "lengths",
    "label_accuracy",
    "judge_label_accuracy",
    "reputation_vs_performance",
    "standings",
    "reward_hacking",
    "training",
    "pair_accuracy",
)


def member_files(t, member):
    """What a member checkpoint is on disk: member.json and, when sparta trained it, its
    adapter and the trainer's log."""
    folder = f"results/{EXP}/iter_{t}/members/{member}"
    trained = t > 0 or MEMBER_SPECS[member].sft_domain
    files = ["adapter/adapter_config.json", "adapter/adapter_model.safetensors", "training_log.parquet"]
    return [f"{folder}/member.json", *([f"{folder}/{f}" for f in files] if trained else [])]


def final_outputs():
    """Every artifact the README promises, so a rerun rebuilds exactly what is missing: the
    tables of every round, the preferences of every iteration, every member checkpoint (with
    its weights), the evaluation and analysis tables, the figures."""
    evaluation = []
    if S.evaluation.enabled:
        evaluation = [f"results/{EXP}/evaluation/{name}" for name in ("selection.tsv", "selection.parquet", "scores.parquet")]
        evaluation += all_evaluations(None)
    analysis = []
    if S.analysis.enabled:
        analysis = [f"results/{EXP}/report/{name}.png" for name in REPORT_FIGURES]
        analysis += [f"results/{EXP}/analysis/{name}.parquet" for name in ANALYSIS_TABLES]
    tables = ("duels.parquet", "state.parquet", "history.parquet", "preferences.parquet",
              "responses/{member}.parquet", "judgments/{member}.parquet")
    return [
        *evaluation,
        *analysis,
        f"results/{EXP}/settings.yaml",
        f"results/{EXP}/reputation_history.parquet",
        f"results/{EXP}/final_state.parquet",
        f"results/{EXP}/iter_0/state.parquet",
        *[f"results/{EXP}/data/{split}.parquet" for split in ("alignment", "validation", "test")],
        *[path for name in tables for path in run_tables(name)],
        *[f"results/{EXP}/iter_{t}/preferences.parquet" for t in ITERATIONS],
        *[path for t in [0, *ITERATIONS] for m in MEMBERS for path in member_files(t, m)],
    ]


# Fan-out: the same rule is one job per member (wildcard {member} / {judge}) or one job per
# round serving the whole pool; its outputs are the same per-member files either way.


def fanout_output(pattern, key="member", fanout=FANOUT):
    """``pattern`` (with ``{key}``) as the output of one job: itself, or every member's file."""
    if fanout == "member":
        return pattern
    return expand(pattern, **{key: MEMBERS}, allow_missing=True)


def fanout_name(prefix, key="member", fanout=FANOUT):
    """Log / benchmark name of one job: ``combat_{member}`` or ``combat_pool``."""
    return f"{prefix}_{{{key}}}" if fanout == "member" else f"{prefix}_pool"


def served(wildcards, key="member", fanout=FANOUT):
    """The members one job serves."""
    return [getattr(wildcards, key)] if fanout == "member" else MEMBERS


def served_member_jsons(key, iteration_offset=1, fanout=FANOUT):
    """member.json of every member a job serves, as they enter iteration t (offset 1) or
    as checkpoint t (offset 0)."""

    def paths(wildcards):
        t = int(wildcards.t) + 1 - iteration_offset
        return [member_json(wildcards, member=m, t=t) for m in served(wildcards, key, fanout)]

    return paths


def model_threads(stage, fanout=FANOUT):
    """Threads of a model job: its GPUs' CPUs on a GPU, else every core of the run for a job
    that serves the pool or trains, one for a job of one member (they run side by side)."""
    r = getattr(S.resources, stage)
    if r.gpu:
        return r.gpu * r.cpus_per_gpu
    return workflow.cores if fanout == "pool" or stage in ("dpo", "sft") else 1


# Cluster resources of a model stage: settings resources.<stage>, runtime and memory grow
# with the attempt so a retry after a Slurm time or memory limit asks for more. Account and
# partition come from the environment when set (or from the profile's default-resources).


def stage_resources(stage):
    r = getattr(S.resources, stage)
    res = dict(
        gpu=r.gpu,
        mem_mb=lambda wc, attempt: int(r.mem_mb * (1 + 0.5 * (attempt - 1))),
        runtime=lambda wc, attempt: r.runtime * attempt,
    )
    if r.gpu:
        res["cpus_per_gpu"] = r.cpus_per_gpu
    for key, var in (("slurm_account", "SPARTA_SLURM_ACCOUNT"), ("slurm_partition", "SPARTA_SLURM_PARTITION")):
        if os.environ.get(var):
            res[key] = os.environ[var]
    return res


onstart:
    # jobs of a local run use this machine's device (a cluster's jobs are checked on their nodes)
    if workflow.local_exec:
        sparta_config.check_local_device(S)
