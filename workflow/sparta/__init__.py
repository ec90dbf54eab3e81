"""sparta: Sparta Alignment (collective alignment of a pool of language models through combat)."""

import os

__version__ = "0.1.0"

# Models and data come from local folders; nothing is fetched from or reported to a hub
# unless the user asks for it (export HF_HUB_OFFLINE=0 to allow downloads). Set before any
# Hugging Face library is imported: they read these once, at import.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
