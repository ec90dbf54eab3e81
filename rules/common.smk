# Validation, settings, wildcard constraints and input functions; no rules.
#
# Every path has the run it belongs to as wildcard {exp}: results/{exp}/... A plain config is
# one run; a study config (sparta/study.py) is several experiments, each a run of its own,
# plus one shared run per seed (results/<study>/_init-seed<s>/) holding the prompt splits,
# the initial pool and its evaluation. Everything a rule needs is looked up per run.
import os
import re
import sys
from typing import NamedTuple

from sparta import config as sparta_config
from sparta import engine
from sparta import finished
from sparta import layout
from sparta import lengths
from sparta import slurm
from sparta.methods import get as get_method
from sparta.settings import Untracked, as_data, section_data


# hf:// hub ids (sparta/hub.py): a dry run plans their download; a real run with an id neither
# in the cache nor reachable stops in the config check below
from sparta import hub

hub.PLANNING = workflow.dryrun or bool(getattr(workflow.output_settings, "dryrun", False))
# a key written twice in config.yaml or a --configfile (YAML keeps the second silently): refused
sparta_config.check_config_files(workflow.configfiles)
# the schema (every problem at once, one line each; numbers read by their meaning, in place;
# --config replace_finished=true, which Snakemake passes as text, as the boolean)
sparta_config.validate(finished.read_switch(config))
# the typed settings of every run (sparta/settings.py holds every default), checked against
# the world before any job starts; paths are relative to the working directory, as in jobs
STUDY = sparta_config.load_study(config, ".")
for note in STUDY.notes:
    print(f"sparta: note: {note}", file=sys.stderr)
# A config that names its own pool but still takes model-scale settings from config.yaml (the
# embedded 135M toy) where sparta's defaults differ: said once, every key named
import yaml

with open(os.path.join(workflow.basedir, "config.yaml")) as _f:
    EMBEDDED_LEFTOVERS = sparta_config.embedded_leftovers(
        yaml.safe_load(_f) or {}, dict(workflow.config_settings.overwrite_config or {})
    )
if EMBEDDED_LEFTOVERS and workflow.is_main_process:
    print(
        f"sparta: note: your config names its own pool but takes {len(EMBEDDED_LEFTOVERS)} setting(s) "
        f"from config.yaml (the embedded 135M toy) where sparta's defaults differ: "
        f"{'; '.join(EMBEDDED_LEFTOVERS)}. "
        "Set them in your config to choose (sparta config prints every value).",
        file=sys.stderr,
    )


RUNS = STUDY.runs  # run id -> settings: the experiments and the shared initial pools
# A finished run of the same name made with other settings (its settings.yaml) is not rebuilt
# without a word: the run stops here, dry runs too, naming the settings that differ, unless
# replace_finished (sparta/finished.py). The main process only: a cluster job's snakemake loads
# the workflow again, after record_settings has written the new settings.
if workflow.is_main_process:
    finished.check(STUDY.experiments, ".")
# Hub ids of every run, downloaded once by the local rule hub_download (pool.smk) into the
# Hugging Face cache; its manifest is an input (ancient: only that it exists) of every
# initial member, so every model job comes after it. Jobs never touch the network.
HUB_IDS = sorted({i for s in RUNS.values() for i in hub.run_ids(s)})
HUB_INPUT = [ancient(layout.hub_manifest())] if HUB_IDS else []
hub.jobs_offline()  # every job: HF_HUB_OFFLINE=1 (a local rule's download says otherwise)
EXPERIMENTS = list(STUDY.experiments)
WIDE = STUDY.settings  # the study-wide settings (sparta.study.StudySettings): fan-out, backend, resources
MEMBER_SPECS = {m.name: m for s in RUNS.values() for m in s.members}
MEMBERS = list(MEMBER_SPECS)  # every member of every run (one pool: one list)
SFT_MEMBERS = [name for name, m in MEMBER_SPECS.items() if m.sft_domain]
GGUF_BASES = sorted({k for s in RUNS.values() for k, v in s.base_models.items() if v.gguf_file})
FANOUT = WIDE.fanout  # member: one job per member / judge; pool: one job serves all
DPO_FANOUT = WIDE.dpo_fanout
# conda env of every rule that imports the model libraries (with --software-deployment-method
# conda, as the Slurm profile runs): envs/train.yaml with backend hf; with backend vllm the one
# GPU env that holds vLLM and the training stack at the versions vLLM needs, envs/vllm.yaml
MODEL_ENV = "../envs/vllm.yaml" if WIDE.backend == "vllm" else "../envs/train.yaml"


def alternatives(names):
    """A wildcard regex matching exactly these names (nothing when empty)."""
    return "|".join(map(re.escape, names)) or "(?!)"


wildcard_constraints:
    exp=alternatives(RUNS),
    study=re.escape(STUDY.name),
    t=r"\d+",
    r=r"\d+",
    member=alternatives(MEMBERS),
    judge=alternatives(MEMBERS),
    base=alternatives(GGUF_BASES),
    split="alignment|validation|test",


# --- per run ------------------------------------------------------------------------------


def run_of(wildcards):
    return RUNS[wildcards.exp]


def init_of(exp):
    """The run holding ``exp``'s prompt splits, initial pool and its evaluation."""
    return STUDY.init_of.get(exp, exp)


def members_of(exp):
    return RUNS[exp].member_names


def iterations_of(exp):
    return list(range(1, RUNS[exp].iterations + 1))


def rounds_of(exp):
    """Rounds per iteration: the matchmaking setting for Sparta; one for a baseline."""
    s = RUNS[exp]
    return list(range(get_method(s.method).rounds(s)))


def settings(*sections):
    """Rule params: the named settings sections of the job's run as plain data
    (sparta.settings.SECTIONS), so a job reruns when, and only when, a setting it uses
    changes."""
    return {name: (lambda wc, name=name: section_data(run_of(wc), name)[name]) for name in sections}


def method(wildcards):
    return run_of(wildcards).method


def baselines(wildcards):
    """Param: the baselines' settings for a baseline run; None (the defaults, unused) for
    Sparta, so editing them reruns nothing of a Sparta run."""
    s = run_of(wildcards)
    return section_data(s, "baselines")["baselines"] if get_method(s.method).baseline else None


def tracking(wildcards):
    """How the trainers report (train.report_to): not compared for reruns."""
    s, t = run_of(wildcards), getattr(wildcards, "t", "0")
    return Untracked(
        {
            "report_to": list(s.train.report_to),
            "project": s.train.project or STUDY.name,
            "run_name": layout.tracker_run(wildcards.exp, t),
            "logging_dir": layout.tensorboard(wildcards.exp, t),
        }
    )


def base_folder(wildcards):
    return run_of(wildcards).base_folder(MEMBER_SPECS[wildcards.member].base)


def base_marker(wildcards):
    """The config.json of a member's base: ties a member to the rule that builds its base (a
    hub id: none; HUB_INPUT ties it to the download)."""
    folder = base_folder(wildcards)
    return [] if hub.is_ref(folder) else f"{folder}/config.json"


def from_hub(member):
    """Whether an initial member's base or adapter is a hub id (rule init_hub_member)."""
    spec = MEMBER_SPECS[member]
    runs = [s for s in RUNS.values() if member in s.member_names]
    return any(hub.is_ref(v) for s in runs for v in (s.base_folder(spec.base), spec.adapter))


def checkpoint_json(exp, member, c):
    """member.json of checkpoint c of a member (0 = the initial pool, in the shared run)."""
    return layout.member_json(STUDY.pool_of(exp) if c == 0 else exp, c, member)


def member_json(wildcards, member=None, t=None):
    """member.json of a member as it enters iteration t (the output of iteration t - 1)."""
    t = int(wildcards.t) if t is None else t
    member = member or getattr(wildcards, "member", None) or wildcards.judge
    return checkpoint_json(wildcards.exp, member, t - 1)


def data(split):
    """Input function: a prompt split of the job's run (made once, in its shared run)."""
    return lambda wc: layout.data(init_of(wc.exp), split)


def round_of(wildcards):
    """The round of a job: its wildcard {r}, or (a rule of the iteration's last round, rule
    aggregate, whose outputs hold the round as a constant) the run's last round."""
    return int(wildcards.r) if hasattr(wildcards, "r") else rounds_of(wildcards.exp)[-1]


def previous_state(wildcards):
    """The reputation state a round starts from: the previous round's, or the previous
    iteration's last round, or the initial state."""
    exp, t, r = wildcards.exp, int(wildcards.t), round_of(wildcards)
    if r > 0:
        return layout.round_table(exp, t, r - 1, "state")
    if t > 1:
        return layout.round_table(exp, t - 1, rounds_of(exp)[-1], "state")
    return layout.initial_state(exp)


def round_tables(kind):
    """Input function: a per-member table of one round (responses/<member>, judgments/<judge>)
    for every member of the run."""

    def paths(wildcards):
        exp, t, r = wildcards.exp, wildcards.t, round_of(wildcards)
        return [layout.member_table(exp, t, r, kind, m) for m in members_of(exp)]

    return paths


def tables_of(exp, name):
    """Every round's table ``name`` over the whole run: one of layout.ROUND_TABLES, or of
    layout.MEMBER_TABLES for each member."""
    rounds = [(t, r) for t in iterations_of(exp) for r in rounds_of(exp)]
    if name in layout.MEMBER_TABLES:
        return [layout.member_table(exp, t, r, name, m) for t, r in rounds for m in members_of(exp)]
    return [layout.round_table(exp, t, r, name) for t, r in rounds]


def run_tables(name):
    """Input function: :func:`tables_of` for the job's run."""
    return lambda wc: tables_of(wc.exp, name)


def earlier_preferences(wildcards):
    """The preference tables of the rounds before round r of iteration t."""
    return [layout.round_table(wildcards.exp, wildcards.t, r, "preferences") for r in range(round_of(wildcards))]


def last_state(wildcards):
    exp = wildcards.exp
    return layout.round_table(exp, iterations_of(exp)[-1], rounds_of(exp)[-1], "state")


def trained_preferences(wildcards):
    """The preference tables the members of iteration t train on (Method.trained_iterations:
    the iteration's own; SPIN's last baselines.spin_history ones)."""
    s = run_of(wildcards)
    ts = get_method(s.method).trained_iterations(int(wildcards.t), s.baselines)
    return [layout.preferences(wildcards.exp, t) for t in ts]


def iteration_preferences(wildcards):
    return [layout.preferences(wildcards.exp, t) for t in iterations_of(wildcards.exp)]


def sft_data(wildcards):
    domain = MEMBER_SPECS[wildcards.member].sft_domain
    return f"{run_of(wildcards).sft.data_dir}/{domain}.jsonl" if domain else []


def prompt_file(wildcards):
    return run_of(wildcards).prompts.source_file()


def prompt_base_markers(wildcards):
    """The config.json of every base a run's members use, built before its prompts are split
    (their tokenizers count the prompts; a hub id: the download)."""
    folders = lengths.prompt_bases(run_of(wildcards))
    return [f"{f}/config.json" for f in folders if not hub.is_ref(f)] + (HUB_INPUT if any(map(hub.is_ref, folders)) else [])


def prompt_lengths(wildcards):
    """Param of split_prompts: what bounds a prompt's length (sparta/lengths.py): the bases
    and the policy, compared for reruns."""
    s = run_of(wildcards)
    return {"bases": lengths.prompt_bases(s), "too_long": s.prompts.too_long}


def prompt_budget(wildcards):
    """Param of split_prompts, not compared for reruns: the answer length and system prompt
    a prompt must leave room for. A new generation.max_new_tokens does not split the prompts
    again (it would rerun the whole run); the config check still counts the prompts too long
    for it before any job (docs: your own pool)."""
    s = run_of(wildcards)
    return Untracked({"max_new_tokens": s.generation.max_new_tokens, "system_prompt": s.system_prompt})


def evaluation_task_files(wildcards):
    return [t.source_file() for t in run_of(wildcards).evaluation.tasks if t.source == "file"]


# Hub datasets of every run (prompts.dataset, evaluation.tasks[].dataset): one Parquet file per
# (dataset, config, split) under results/_data/, written by the local rule hub_dataset
HUB_DATASETS = {
    hub.dataset_key(d.dataset, d.config, d.split): (d.dataset, d.config, d.split)
    for s in RUNS.values()
    for d in hub.dataset_sources(s)
}


def evaluated_checkpoints(exp):
    """Checkpoints evaluated: all, or the initial pool and the last (evaluation.checkpoints)."""
    last = iterations_of(exp)
    return [0, *last] if RUNS[exp].evaluation.checkpoints == "all" else [0, last[-1]]


def evaluations_of(exp):
    """Evaluation tables of the evaluated checkpoints of every member (checkpoint 0 in the
    shared run)."""
    return [evaluation_of(exp, c, m) for c in evaluated_checkpoints(exp) for m in members_of(exp)]


def evaluation_of(exp, c, member):
    """The evaluation of checkpoint c of a member (checkpoint 0 in the shared run)."""
    return layout.evaluation(init_of(exp) if c == 0 else exp, c, member)


def all_evaluations(wildcards):
    return evaluations_of(wildcards.exp)


def trained(exp, c, member):
    return c > 0 or bool(MEMBER_SPECS[member].sft_domain)


def all_training_logs(wildcards):
    """The trainer's log of every trained checkpoint (SFT of iteration 0, DPO after)."""
    exp = wildcards.exp
    return [
        checkpoint_file(exp, m, c, "training_log.parquet")
        for c in [0, *iterations_of(exp)]
        for m in members_of(exp)
        if trained(exp, c, m)
    ]


def held_out_accuracy(wildcards):
    exp = wildcards.exp
    return [layout.pair_accuracy(exp, t) for t in iterations_of(exp)[:-1]]


def optional_evaluation(wildcards):
    """The evaluation scores when evaluation is on; analyses and plots work without them."""
    return layout.evaluation_file(wildcards.exp, layout.SCORES) if run_of(wildcards).evaluation.enabled else []


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
    "pairs",
    "lengths",
    "label_accuracy",
    "judge_label_accuracy",
    "reputation_vs_performance",
    "standings",
    "reward_hacking",
    "training",
    "pair_accuracy",
    "judging",
)


def checkpoint_file(exp, member, c, name):
    """A file of checkpoint c of a member (layout.TRAINED_FILES; 0 = in the shared run)."""
    return layout.member_file(STUDY.pool_of(exp) if c == 0 else exp, c, member, name)


def member_files(exp, c, member):
    """What a member checkpoint is on disk: member.json and, when sparta trained it, its
    adapter and the trainer's log."""
    files = layout.TRAINED_FILES if trained(exp, c, member) else ()
    return [checkpoint_json(exp, member, c), *[checkpoint_file(exp, member, c, f) for f in files]]


def target_of(exp):
    """Files of a run that every job of it leads to (the evaluation and analysis tables, the
    figures, the settings, the reputation history and final state, every iteration's
    preferences, every member's last checkpoint): asked for, they put every job of the run in
    the plan, as asking for every artifact (:func:`outputs_of`) does."""
    s = RUNS[exp]
    evaluation = []
    if s.evaluation.enabled:
        evaluation = [layout.evaluation_file(exp, f) for f in ("selection.tsv", layout.SELECTION, layout.SCORES)]
    analysis = []
    if s.analysis.enabled:
        analysis = [layout.figure(exp, name) for name in REPORT_FIGURES]
        analysis += [layout.analysis(exp, name) for name in ANALYSIS_TABLES]
    return [
        *evaluation,
        *analysis,
        layout.run_file(exp, layout.SETTINGS),
        layout.run_file(exp, "reputation_history.parquet"),
        layout.run_file(exp, "final_state.parquet"),
        layout.initial_state(exp),
        *[layout.preferences(exp, t) for t in iterations_of(exp)],
        *[checkpoint_json(exp, m, iterations_of(exp)[-1]) for m in members_of(exp)],
    ]


def outputs_of(exp):
    """Every artifact the docs promise for a run, so a rerun rebuilds exactly what is
    missing: :func:`target_of`'s files, and the evaluations of every checkpoint, the prompt
    splits, the tables of every round, every member checkpoint (with its weights)."""
    init = init_of(exp)
    tables = (*layout.ROUND_TABLES, *layout.MEMBER_TABLES)
    files = [
        *target_of(exp),
        *(evaluations_of(exp) if RUNS[exp].evaluation.enabled else []),
        *[layout.data(init, split) for split in layout.SPLITS],
        *[path for name in tables for path in tables_of(exp, name)],
        *[path for c in [0, *iterations_of(exp)] for m in members_of(exp) for path in member_files(exp, c, m)],
    ]
    return list(dict.fromkeys(files))  # the last checkpoints' member.json are target_of's too


# SPARTA_FULL_TARGET=1: rule all asks for every artifact of every run, begun or not
FULL_TARGET = os.environ.get("SPARTA_FULL_TARGET") == "1"


def requested_of(exp):
    """What rule all asks of a run. Once any artifact of it exists (its shared initial pool's
    count), every artifact: snakemake rebuilds a missing file only when something asks for it,
    and no job reads an earlier checkpoint's adapter, say. Before that, :func:`target_of`: the
    plan has the same jobs (every output of every job is missing; tests/test_planning.py
    compares the two plans) and costs a fraction, since each file asked for costs the plan
    time (benchmarks/bench_dag.py: Table 1 asks for ~165,000 artifacts, ~12,000 files)."""
    full = outputs_of(exp)
    return full if FULL_TARGET or any(map(os.path.exists, full)) else target_of(exp)


def final_outputs(per_run=outputs_of):
    """Every artifact of every run (per_run=requested_of: what rule all asks for), the
    study's comparison, the shared bases and the hub manifest."""
    study = []
    if STUDY.is_study and any(s.evaluation.enabled for s in STUDY.experiments.values()):
        study = [
            layout.study_file(STUDY.name, f)
            for f in ("comparison.tsv", layout.COMPARISON, layout.COST, "comparison.png")
        ]
    # the converted bases every member is made from (shared by every run: results/_bases/),
    # and the manifest of the hub downloads
    used = {m.base for s in RUNS.values() for m in s.members}  # config.yaml's toy base, unused: no
    bases = [f"{layout.base_dir(base)}/config.json" for base in GGUF_BASES if base in used]
    bases += [layout.hub_manifest()] if HUB_IDS else []
    return [path for exp in EXPERIMENTS for path in per_run(exp)] + study + bases


# sparta's changes to how Snakemake behaves (sparta/engine/, docs/development/engine.md), each
# tested with the Snakemake that requirements.txt pins; SPARTA_ENGINE=plain runs without them.
# planning: the rules that can produce a file, found by the outputs' constant suffixes (every
# output starts results/{exp}/, which Snakemake's prefix index cannot tell apart). locks: each
# run's main process holds a kernel lock, .snakemake/sparta-<experiment or study>.flock; a
# second snakemake on a live run stops naming it, lock files go only when their owner is
# provably dead (kill -9, then the same command, is a full recovery). keep: a failing rerun
# keeps the previous outputs (moved aside before the job, back if it fails). integrity: a
# finished file of the target whose size or content changed since its job succeeded (or a
# table with an unreadable Parquet footer) is reported and rebuilt with what depends on it; a
# shared base (convert_gguf, hub_download) rebuilt with the same bytes retrains no member.
engine.install(
    workflow,
    STUDY.name,
    "study" if STUDY.is_study else "experiment",
    target=final_outputs(),
    shared_bases=["convert_gguf", "hub_download"],
    run_dirs=[layout.run_dir(run) for run in RUNS],
)


# Fan-out: the same rule is one job per member (wildcard {member} / {judge}) or one job per
# round serving the whole pool; its outputs are the same per-member files either way.


def study_runs(wildcards):
    """Param of compare: every experiment run of the study, with where its pieces are."""
    return [
        {
            "run": exp,
            "experiment": STUDY.labels[exp],
            "seed": RUNS[exp].seed,
            "init": init_of(exp),
            "iterations": iterations_of(exp),
            "checkpoints": evaluated_checkpoints(exp)[1:],
            "rounds": rounds_of(exp),
            "members": members_of(exp),
            "select_from": RUNS[exp].evaluation.select_from,
        }
        for exp in EXPERIMENTS
    ]


def study_inputs(wildcards):
    """Named inputs of compare, per experiment run (keyed ``<what>:<run>``, one
    ``responses:<run>:<t>`` / ``judgments:<run>:<t>`` per iteration): its evaluations (of its
    evaluated checkpoints), its initial pool's, its selection, its answers and judgments."""
    named = {}
    for exp in EXPERIMENTS:
        named[f"initial:{exp}"] = [evaluation_of(exp, 0, m) for m in members_of(exp)]
        named[f"evaluations:{exp}"] = [
            evaluation_of(exp, c, m) for c in evaluated_checkpoints(exp)[1:] for m in members_of(exp)
        ]
        named[f"selection:{exp}"] = layout.evaluation_file(exp, layout.SELECTION)
        for kind in layout.MEMBER_TABLES:
            for t in iterations_of(exp):
                named[f"{kind}:{exp}:{t}"] = [
                    layout.member_table(exp, t, r, kind, m) for r in rounds_of(exp) for m in members_of(exp)
                ]
    return named


# Pools: a job that serves the pool writes every member's file, and a rule's outputs are fixed
# when it is defined. Under fanout pool each distinct pool of the study (a run's member set: a
# study's pool sizes, Figure 3; a shared initial pool holding members that no experiment uses
# all together) has rules of its own per stage, each held to its pool's runs: the pool most
# runs use gets the plain names (combat, judge, dpo, evaluate_member), the others
# <stage>_pool2, <stage>_pool3, ... (rules/combat.smk ...): one job per round, checkpoint or
# DPO for every pool, never one per member.
_POOLS = {}
for _run, _s in RUNS.items():
    _POOLS.setdefault(frozenset(_s.member_names), (_s.member_names, []))[1].append(_run)
POOLS = sorted(_POOLS.values(), key=lambda pool: -len(pool[1]))  # most used first (stable)
POOL = POOLS[0][0]


def pool_rules(stage, fanout=FANOUT):
    """The rules of a model stage as (name, members, wildcard constraints): one rule with the
    member wildcard (fanout member), or one per pool (fanout pool) whose job serves the pool's
    members, the first with the plain name."""
    if fanout == "member":
        return [(stage, None, {})]
    if len(POOLS) == 1:
        return [(stage, POOL, {})]
    return [
        (stage if i == 0 else f"{stage}_pool{i + 1}", members, {"exp": alternatives(runs)})
        for i, (members, runs) in enumerate(POOLS)
    ]


def fanout_output(pattern, members, key="member"):
    """``pattern`` (with ``{key}``) as the output of one job: itself (members None: one job per
    member), or the file of every member of a pool."""
    if members is None:
        return pattern
    return expand(pattern, **{key: members}, allow_missing=True)


def fanout_name(prefix, key="member", fanout=FANOUT):
    """Log / benchmark name of one job: ``combat_{member}`` or ``combat_pool``."""
    return f"{prefix}_{{{key}}}" if fanout == "member" else f"{prefix}_pool"


def served(wildcards, key="member"):
    """The members one job serves: its member (a rule with the wildcard) or its run's pool."""
    return [getattr(wildcards, key)] if hasattr(wildcards, key) else members_of(wildcards.exp)


def served_names(key="member"):
    """Param of a model job: the names of the members it serves. Its script reads its members
    from its member.json inputs alone (sparta.jobs.members); this param is only part of the
    job's record, kept so a run made before it was read no more resumes without a rerun
    (snakemake reruns a job whose params' values change)."""
    return lambda wildcards: served(wildcards, key)


def served_member_jsons(key):
    """member.json of every member a job of iteration {t} serves, as they enter it."""
    return lambda wildcards: [member_json(wildcards, member=m) for m in served(wildcards, key)]


def checkpoint_member_jsons(key):
    """member.json of every member a job serves at checkpoint {c} (0: the initial pool)."""
    return lambda wildcards: [checkpoint_json(wildcards.exp, m, int(wildcards.c)) for m in served(wildcards, key)]


def model_threads(stage, fanout=FANOUT):
    """Threads of a model job: its GPUs' CPUs on a GPU, else for a job that serves the pool
    the run's cores shared among the experiments that run side by side (one run: every core;
    a study of 10 runs on 2 cores: one each, two pool jobs at a time: a 2-thread generation
    job of the 135M pool used 1.2 cores), one for a job of one member, trainers included
    (they run side by side: on 2 cores two one-thread SFT jobs took 117 s for the default's
    four members, one two-thread job at a time 271 s, benchmarks/bench_train.py). A cluster
    run has no core count of its own (no --cores): a CPU-only job there asks for cpus_per_gpu
    cores (Slurm --cpus-per-task); a profile's set-threads overrides either."""
    r = getattr(WIDE.resources, stage)
    # a cluster run, on the login node and in the job itself: what the job asks Slurm for (the
    # login node's or the node's cores mean nothing there: srun refused a pool job that asked for
    # them); --cores not given: the same
    if workflow.non_local_exec or workflow.remote_exec or workflow.resource_settings.cores is None:
        return r.gpu * r.cpus_per_gpu if r.gpu else r.cpus_per_gpu
    if r.gpu and LOCAL_CUDA:
        return r.gpu * r.cpus_per_gpu
    return max(1, workflow.cores // len(EXPERIMENTS)) if fanout == "pool" else 1


# whether a local run's model jobs use a CUDA GPU (resources.<stage>.gpu is for a cluster; on a
# CPU the thread rule above applies)
LOCAL_CUDA = sparta_config.local_cuda(WIDE)


# Cluster resources of a model stage: settings resources.<stage>; runtime and memory grow
# with the attempt so a retry after a Slurm time or memory limit asks for more, within
# SPARTA_SLURM_MAX_RUNTIME / _MAX_MEM_MB, else the partition's own (scontrol; sparta/slurm.py).
# ask_slurm is asked when a job's resources are computed: Snakemake 9.27 sets its executor when
# the run starts, after the Snakefile is parsed (onstart checks the first attempts).
# Account and partition come from the environment when set (or the profile's default-resources):
# SPARTA_SLURM_PARTITION for jobs with GPUs, SPARTA_SLURM_CPU_PARTITION for those without.
def ask_slurm():
    return workflow.is_main_process and workflow.non_local_exec and not workflow.dryrun


def slurm_job(name, gpu, mem_mb, runtime):
    try:
        return slurm.job_resources(name, gpu, mem_mb, runtime, ask_slurm=ask_slurm)
    except slurm.LimitError as e:
        raise WorkflowError(str(e)) from None


def stage_resources(stage):
    r = getattr(WIDE.resources, stage)
    res = dict(gpu=r.gpu, **slurm_job(f"resources.{stage}", r.gpu, r.mem_mb, r.runtime))
    if r.gpu:
        res["cpus_per_gpu"] = r.cpus_per_gpu
    return res


class ModelRule(NamedTuple):
    """What every model rule has in common, one per pool of a stage (made by
    :func:`model_rules`), so that a rule file writes only what is its own (inputs, outputs,
    settings, script)."""

    name: str  # the stage's rule, or <rule>_pool2 ... for another pool (pool_rules)
    members: list | None  # the members a job serves; None: one job per member ({key} wildcard)
    wildcards: dict  # wildcard constraints: the runs of its pool
    key: str  # the member wildcard: member, or judge
    log: str
    benchmark: str
    threads: int
    resources: dict
    served: object  # param: the names of the members a job serves (served_names)

    def output(self, pattern):
        """An output with ``{key}``: one per job, or the file of each member of the pool."""
        return fanout_output(pattern, self.members, self.key)


def model_rules(name, stage=None, key="member", fanout=FANOUT, **where):
    """The rules of a model stage (:func:`pool_rules`), each with its log and benchmark
    (``<stage>_{key}`` or ``<stage>_pool`` under ``where``: t and r, or the checkpoint's
    folder), threads (:func:`model_threads`) and cluster resources (:func:`stage_resources`)
    of settings resources.<stage>."""
    stage = stage or name
    job = fanout_name(stage, key, fanout)
    return [
        ModelRule(
            rule_name,
            members,
            constraints,
            key,
            layout.log("{exp}", job, **where),
            layout.benchmark("{exp}", job, **where),
            model_threads(stage, fanout),
            stage_resources(stage),
            served_names(key),
        )
        for rule_name, members, constraints in pool_rules(name, fanout)
    ]


onstart:
    # outputs an interrupted run had set aside go back where they are missing (sparta/engine/keep.py)
    engine.started(workflow)
    # on a cluster: jobs an earlier snakemake of this folder left queued or running (it died: its
    # experiments' locks are this process's now) are cancelled before any job is submitted
    if not workflow.local_exec and workflow.is_main_process:
        slurm.cancel_orphans(os.getcwd(), list(RUNS), say=lambda line: print(line, file=sys.stderr))
        # every job to run asks at first no more than its partition gives (scontrol), before any
        # is submitted
        try:
            slurm.check_first_attempts(slurm.first_attempts(workflow))
        except slurm.LimitError as e:
            raise WorkflowError(str(e)) from None
    # jobs of a local run use this machine's device (a cluster's jobs are checked on their nodes)
    if workflow.local_exec:
        sparta_config.check_local_device(WIDE)
