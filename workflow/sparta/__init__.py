"""sparta: Sparta Alignment (collective alignment of a pool of language models through combat)."""

import os

__version__ = "0.1.0"

# Nothing is reported to a hub. HF_HUB_OFFLINE is left as the user set it: the workflow sets it
# for its jobs (sparta.hub.jobs_offline), after reading the user's own value, so the one rule
# that downloads (hub_download, where snakemake runs) can reach the hub.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
