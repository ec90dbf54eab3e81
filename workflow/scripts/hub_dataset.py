"""rule hub_dataset: one (config, split) of a hub dataset from the Hugging Face cache to
Parquet under results/_data/ (sparta/hub.py)."""

from sparta import hub
from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
dataset, config, split = sm.params.source
frame = hub.load_split(dataset, config, split)  # at the commit of results/_hub/manifest.parquet
if len(frame) == 0:
    raise hub.HubError(f"dataset {dataset} (config {config or 'default'}), split {split!r} has no rows")
hub.write_dataset(frame, sm.output.data)
log.info(
    "%s (config %s), split %s: %d rows, columns %s",
    dataset,
    config or "default",
    split,
    len(frame),
    list(frame.columns),
)
