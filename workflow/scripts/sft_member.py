"""rule sft_member: an initial member made by a short LoRA SFT on its domain."""

from pathlib import Path

from sparta import tables
from sparta.data import read_table_file
from sparta.logs import setup
from sparta.members import RESULTS, MemberSpec, base_reference
from sparta.settings import job_settings
from sparta.train import Tracking, sft_member, training_log

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
name, base = sm.params.member["name"], sm.params.base
out = Path(sm.output.member).parent
data = read_table_file(sm.input.sft, "SFT data file", "sft.data_dir").head(job.sft.examples)
tracking = Tracking(**sm.params.tracking.value)
summary = sft_member(MemberSpec(name, base), data, out, job.sft, job.lora, job.runtime, tracking=tracking)
history = summary.pop("log_history")
tables.write(training_log(history, name, 0, "sft", len(data)), sm.output.training_log, "training_log")
log.info("SFT of %s on %s: %s", name, sm.params.member["sft_domain"], summary)
MemberSpec(name, base_reference(base), str(out / "adapter")).write(sm.output.member, root=RESULTS)
