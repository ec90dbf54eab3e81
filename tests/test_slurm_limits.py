"""What a Slurm job asks for (sparta/slurm.py): account and partition for every job, the GPU
partition only with GPUs, and retries that stay within the partition's limits."""

import pytest

from sparta import slurm


class WC:
    pass


def ask(res, attempt):
    return res["runtime"](WC, attempt), res["mem_mb"](WC, attempt)


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("60", 60),
        ("1:00:00", 60),
        ("2-00:00:00", 2880),
        ("1-12", 2160),
        ("00:30:01", 31),
        ("UNLIMITED", None),
    ],
)
def test_slurm_times_in_minutes(text, minutes):
    assert slurm.minutes(text) == minutes


def test_account_for_every_job_and_the_gpu_partition_only_with_gpus():
    env = {
        "SPARTA_SLURM_ACCOUNT": "acct",
        "SPARTA_SLURM_PARTITION": "gpu",
        "SPARTA_SLURM_CPU_PARTITION": "cpu",
        "SPARTA_SLURM_GPU_MODEL": "a100",
    }
    gpu = slurm.job_resources("resources.dpo", 1, 1000, 60, env=env)
    cpu = slurm.job_resources("rule analyze", 0, 1000, 60, env=env)
    assert (gpu["slurm_account"], gpu["slurm_partition"], gpu["gpu_model"]) == ("acct", "gpu", "a100")
    assert (cpu["slurm_account"], cpu["slurm_partition"]) == ("acct", "cpu") and "gpu_model" not in cpu
    # no CPU partition named: the cluster's default, never the GPU partition
    env.pop("SPARTA_SLURM_CPU_PARTITION")
    assert "slurm_partition" not in slurm.job_resources("rule analyze", 0, 1000, 60, env=env)


def test_retries_grow_within_the_documented_caps():
    free = slurm.job_resources("resources.dpo", 1, 96000, 240, env={})
    assert [ask(free, a) for a in (1, 2, 3)] == [(240, 96000), (480, 144000), (720, 192000)]
    env = {"SPARTA_SLURM_MAX_RUNTIME": "480", "SPARTA_SLURM_MAX_MEM_MB": "150000"}
    capped = slurm.job_resources("resources.dpo", 1, 96000, 240, env=env)
    assert [ask(capped, a) for a in (1, 2, 3)] == [(240, 96000), (480, 144000), (480, 150000)]


def test_a_first_attempt_past_the_limit_stops_naming_it():
    with pytest.raises(slurm.LimitError, match=r"resources.dpo asks for 600 min, more than the limit of 480"):
        slurm.job_resources("resources.dpo", 1, 1000, 600, env={"SPARTA_SLURM_MAX_RUNTIME": "480"})
    with pytest.raises(slurm.LimitError, match=r"asks for 96000 MB, more than the limit of 64000 MB"):
        slurm.job_resources("resources.dpo", 1, 96000, 60, env={"SPARTA_SLURM_MAX_MEM_MB": "64000"})


def test_the_partition_s_own_limits_from_scontrol(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "PartitionName=gpu"\n'
        'echo "   AllowGroups=ALL Default=NO MaxNodes=UNLIMITED MaxTime=08:00:00 MinNodes=0"\n'
        'echo "   MaxMemPerNode=128000 DefMemPerNode=UNLIMITED"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    slurm.partition_limits.cache_clear()
    try:
        env = {"SPARTA_SLURM_PARTITION": "gpu"}
        res = slurm.job_resources("resources.dpo", 1, 96000, 240, ask_slurm=True, env=env)
        assert [ask(res, a) for a in (1, 2, 3)] == [(240, 96000), (480, 128000), (480, 128000)]
        with pytest.raises(slurm.LimitError, match=r"limit of 480 min in partition gpu \(scontrol"):
            slurm.job_resources("resources.dpo", 1, 96000, 600, ask_slurm=True, env=env)
        # not asked (a local run, a dry run, a job's own snakemake): no scontrol call, no cap
        res = slurm.job_resources("resources.dpo", 1, 96000, 600, env=env)
        assert ask(res, 3) == (1800, 192000)
        # asked when the attempt's resources are computed (the executor is known once the run
        # starts, after the Snakefile is read): no cap while parsing, the partition's at the run
        running = {"slurm": False}
        res = slurm.job_resources("resources.dpo", 1, 96000, 600, ask_slurm=lambda: running["slurm"], env=env)
        running["slurm"] = True
        assert ask(res, 2) == (480, 128000)
        # the run's start checks the first attempts against the partition, before any submission
        assert ask(res, 1) == (600, 96000)  # a first attempt as asked: the run's start checks it
        with pytest.raises(slurm.LimitError, match=r"rule dpo asks for 600 min, more than the limit of 480"):
            slurm.check_first_attempts([slurm.Request("rule dpo", "gpu", 96000, 600)], env=env)
        slurm.check_first_attempts([slurm.Request("resources.sft", "gpu", 1000, 60)], env=env)
    finally:
        slurm.partition_limits.cache_clear()
