"""rule hub_download: every hf:// hub id of the runs into the Hugging Face cache, and the
manifest (id, requested revision, resolved commit, kind, files, size). Every downloaded
adapter is checked against what the run's backend can serve before the manifest is written,
so a model job never starts on one it would refuse (the files stay cached for the rerun)."""

import os

# the workflow sets HF_HUB_OFFLINE=1 for its jobs; this one downloads, unless the user said offline
os.environ["HF_HUB_OFFLINE"] = "1" if snakemake.params.offline else "0"  # noqa: F821

from sparta import hub  # noqa: E402
from sparta.logs import setup  # noqa: E402

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
rows = hub.download(list(sm.params.ids))
for row in rows:
    log.info(
        "%s: %s at commit %s (%s, %d files, %d bytes)",
        row["id"],
        row["repo"],
        row["commit"],
        row["kind"],
        row["files"],
        row["size"],
    )
backend = sm.params.backend.value
problems = hub.adapter_problems(rows, backend)
if problems:
    raise hub.HubError(
        f"{len(problems)} downloaded adapter problem(s) for backend {backend}:\n  - "
        + "\n  - ".join(problems)
    )
hub.write_manifest(rows, sm.output.manifest)
