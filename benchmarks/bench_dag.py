"""DAG building time of the paper-scale config (10 members, 8 iterations, 1000 prompts each).

    python benchmarks/bench_dag.py [--study] [--tasks] [--as-typed]

Times `snakemake -n` (whole process: start, parse, DAG, job listing) in a temporary folder,
offline (the hub ids' downloads are part of the plan) for paper.yaml with fanout pool (as
shipped) and fanout member (target: under 10 s each); ``--study`` adds paper-study.yaml (36
runs), ``--tasks`` paper-study.yaml and paper-tasks.yaml (the hub tasks of Table 1, the
ablations and pool sizes on two of them: 162 runs),
each timed once; ``--as-typed`` times those plans also as a user types them on a cluster
(``--profile slurm``, every job printed).
"""

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.workflow_helpers import paper_workspace  # noqa: E402

PAPER = REPO / "workflow" / "configs" / "paper.yaml"


def plan(work: Path, *configs: Path, as_typed: bool = False) -> tuple[str, float]:
    """Jobs and seconds of one dry run: ``-q rules`` (the job counts only), or ``as_typed``
    as a user types it on a cluster (``--profile slurm``, every job printed)."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    cmd += ["--profile", str(REPO / "slurm")] if as_typed else ["-q", "rules"]
    start = time.perf_counter()
    proc = subprocess.run([*cmd, "--configfile", *map(str, configs)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    total = re.search(r"^total\s+(\d+)", proc.stdout + proc.stderr, flags=re.M).group(1)
    return total, seconds


def main() -> None:
    work = paper_workspace(Path(tempfile.mkdtemp(prefix="sparta-dag-")), PAPER)
    configs = REPO / "workflow" / "configs"
    extra = {"--study": ["paper-study.yaml"], "--tasks": ["paper-study.yaml", "paper-tasks.yaml"]}
    for flag, names in extra.items():
        if flag in sys.argv[1:]:
            total, seconds = plan(work, PAPER, *(configs / n for n in names))
            print(f"paper.yaml + {' + '.join(names)}: {total} jobs, snakemake -n -q rules {seconds:.1f} s")
            if "--as-typed" in sys.argv[1:]:
                total, seconds = plan(work, PAPER, *(configs / n for n in names), as_typed=True)
                print(
                    f"paper.yaml + {' + '.join(names)}: {total} jobs, snakemake -n --profile slurm "
                    f"(every job printed) {seconds:.1f} s"
                )
    for fanout in ("pool", "member"):
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(work),
            "--configfile",
            str(PAPER),
            "--config",
            f"fanout={fanout}",
        ]
        times = []
        for _ in range(3):
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - start)
        total = re.search(r"^total\s+(\d+)", proc.stdout, flags=re.M).group(1)
        print(
            f"fanout {fanout}: {total} jobs, snakemake -n {min(times):.2f} s (best of 3; "
            f"{', '.join(f'{t:.2f}' for t in times)})"
        )


if __name__ == "__main__":
    main()
