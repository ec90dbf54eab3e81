"""DAG building time of the paper-scale config (10 members, 8 iterations, 1000 prompts each).

    python benchmarks/bench_dag.py

Creates stand-in files for the config's placeholder paths in a temporary folder, then times
`snakemake -n` (whole process: start, parse, DAG, job listing) for fanout pool (as shipped)
and fanout member. Target: under 10 s each.
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


def main() -> None:
    work = paper_workspace(Path(tempfile.mkdtemp(prefix="sparta-dag-")), PAPER)
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
