"""rule record_settings: the resolved settings of the run, as YAML."""

import yaml

from sparta.logs import setup

sm = snakemake  # noqa: F821
setup(sm.log[0])
with open(sm.output.settings, "w") as f:
    yaml.safe_dump(sm.params.settings, f, sort_keys=False)
