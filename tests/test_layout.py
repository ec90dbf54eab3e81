"""sparta.layout: the one owner of a run's paths. The strings are the layout every run on disk
has (a change here is a change of every run's paths: runs made before would not resume)."""

from sparta import layout
from sparta.members import RESULTS, MemberSpec
from sparta.settings import MemberConfig
from sparta.study import StudySettings, expand

from .workflow_helpers import tiny_config


def test_paths_are_the_runs_layout():
    assert layout.member_json("x", 0, "ann") == "results/x/iter_0/members/ann/member.json"
    assert (
        layout.member_file("x", 2, "ann", "training_log.parquet")
        == "results/x/iter_2/members/ann/training_log.parquet"
    )
    assert layout.round_table("x", 1, 0, "duels") == "results/x/iter_1/round_0/duels.parquet"
    assert (
        layout.member_table("x", 1, 2, "judgments", "bob") == "results/x/iter_1/round_2/judgments/bob.parquet"
    )
    assert layout.initial_state("x") == "results/x/iter_0/state.parquet"
    assert layout.preferences("x", 3) == "results/x/iter_3/preferences.parquet"
    assert layout.data("x", "test") == "results/x/data/test.parquet"
    assert layout.evaluation("x", 0, "ann") == "results/x/evaluation/checkpoint_0/ann.parquet"
    assert layout.pair_accuracy("x", 1) == "results/x/analysis/pair_accuracy/iter_1.parquet"
    assert layout.tensorboard("x", 1) == "results/x/logs/tensorboard/iter_1"
    assert layout.base_dir("smollm2") == "results/_bases/smollm2"
    assert RESULTS == layout.RESULTS == "results"


def test_wildcards_give_the_rules_patterns():
    assert layout.member_table("{exp}", "{t}", "{r}", "responses", "{member}") == (
        "results/{exp}/iter_{t}/round_{r}/responses/{member}.parquet"
    )
    assert (
        layout.log("{exp}", "combat_pool", t="{t}", r="{r}")
        == "results/{exp}/logs/iter_{t}/round_{r}/combat_pool.log"
    )
    assert (
        layout.benchmark("{exp}", "init_{member}", t=0) == "results/{exp}/benchmarks/iter_0/init_{member}.tsv"
    )
    assert layout.log("{exp}", "evaluate_pool", where=layout.checkpoint_where("{c}")) == (
        "results/{exp}/logs/evaluation/checkpoint_{c}/evaluate_pool.log"
    )
    assert layout.log("{exp}", layout.pair_accuracy_name("{t}"), where="analysis") == (
        "results/{exp}/logs/analysis/pair_accuracy_iter_{t}.log"
    )
    assert layout.log("{study}", "compare") == "results/{study}/logs/compare.log"


def test_run_folder(tmp_path):
    run = layout.RunFolder(tmp_path / "x")
    assert not run.is_run()
    for t, r in ((1, 0), (1, 1), (2, 0)):
        (run.round(t, r)).mkdir(parents=True)
        (run.round(t, r) / "state.parquet").write_text("")
    (run.iteration(0)).mkdir()
    (run.iteration(0) / "state.parquet").write_text("")
    for c in (0, 2, 10):
        run.member_json(c, "ann").parent.mkdir(parents=True)
        run.member_json(c, "ann").write_text("{}")
    assert run.is_run()
    assert run.checkpoints("ann") == [0, 2, 10] and run.checkpoints("bob") == []
    assert [p.relative_to(run.path).as_posix() for p in run.states()] == [
        "iter_0/state.parquet",
        "iter_1/round_0/state.parquet",
        "iter_1/round_1/state.parquet",
        "iter_2/round_0/state.parquet",
    ]
    assert layout.iteration_of(run.iteration(10)) == 10 and layout.iteration_of(run.path) is None
    assert [p.name for p in layout.rounds_of(run.iteration(1))] == ["round_0", "round_1"]
    assert len(layout.round_files(run.iteration(1), "state.parquet")) == 2
    assert layout.run_folders(tmp_path) == [run.path]
    assert run.settings == run.path / "settings.yaml"
    assert run.at(layout.evaluation_file, layout.SELECTION) == run.path / "evaluation" / "selection.parquet"


def test_no_path_of_a_run_is_built_outside_the_layout():
    """The iter_/round_/checkpoint_ folders and the run's evaluation, settings and study files
    are named by sparta.layout only (rules and scripts call it)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    built = re.compile(
        r"""f["'][^"']*\b(iter|round|checkpoint)_\{|["'/](settings\.yaml|selection\.parquet|scores\.parquet|"""
        r"""comparison\.parquet|cost\.parquet)["']|/ *["']evaluation["']"""
    )
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in [*root.glob("workflow/**/*.py"), *root.glob("rules/*.smk")]
        if path.name != "layout.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if built.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


def test_one_member_type_and_the_study_settings(tiny_base):
    assert MemberConfig is MemberSpec
    study = expand(tiny_config(tiny_base, fanout="pool"))
    members = next(iter(study.experiments.values())).members
    assert members[0] == MemberSpec("ann", "tiny", None, "addition")
    wide = study.settings
    assert isinstance(wide, StudySettings)
    assert (wide.fanout, wide.dpo_fanout, wide.backend, wide.device) == ("pool", "pool", "hf", "cpu")
