"""Cost of the integrity check at the start of a run (sparta/engine/integrity.py), README default.

    python benchmarks/bench_integrity.py

Lists the default config's target (a dry run in an empty folder), writes a stand-in for every
file of it (tables as small Parquet files, adapters 3.7 MB as the default's LoRA adapters,
the rest a few bytes), then times the check of a dry run three times: the first run records
every file (hashes them all: a finished run made before records existed), the next ones only
check. Target: under 2 s.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]


def dry_run(work: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(work)]
    cmd += ["--configfile", str(REPO / "config.yaml")]
    env = {**os.environ, "SPARTA_INTEGRITY_BENCH": str(out)}
    subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(out.read_text())


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="sparta-integrity-"))
    (work / "data").symlink_to(REPO / "data")  # the default config's prompts and SFT data
    out = work / "bench.json"
    files = dry_run(work, out)["files"]
    table = pa.table({"x": list(range(200)), "y": [f"row {i}" for i in range(200)]})
    for f in files:
        path = work / f
        path.parent.mkdir(parents=True, exist_ok=True)
        if f.endswith(".parquet"):
            pq.write_table(table, path)
        elif f.endswith(".safetensors"):
            path.write_bytes(os.urandom(3_717_656))
        else:
            path.write_bytes(b"{}\n")
    size = sum((work / f).stat().st_size for f in files)
    for what in ("first check (records every file)", "check", "check"):
        seconds = dry_run(work, out)["seconds"]
        print(f"{what}: {len(files)} files, {size / 1e6:.0f} MB: {seconds:.3f} s")


if __name__ == "__main__":
    main()
