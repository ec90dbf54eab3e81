"""rules sft_member / init_member: iteration-0 member (SFT on its domain, a given adapter, or the base)."""

from pathlib import Path

import pandas as pd

from sparta.logs import setup
from sparta.models import MemberSpec

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
spec = sm.params.spec
out = Path(sm.output.member).parent
if spec.get("sft_domain"):
    from sparta.train import LoraParams, SFTParams, sft_member

    s = sm.params.sft
    data = pd.read_json(sm.input.sft, lines=True).head(s["examples"])
    sft = SFTParams(max_steps=s["max_steps"], learning_rate=s["learning_rate"],
                    batch_size=s["batch_size"], max_length=s["max_length"])  # fmt: skip
    summary = sft_member(spec["name"], sm.params.base, data, out, sft, LoraParams(**sm.params.lora),
                         sm.params.seed, sm.params.system, sm.params.device, sm.params.dtype)  # fmt: skip
    log.info("SFT of %s on %s: %s", spec["name"], spec["sft_domain"], summary)
    adapter = str(out / "adapter")
else:
    adapter = str(Path(spec["adapter"]).resolve()) if spec.get("adapter") else None
    log.info("member %s: base %s, adapter %s", spec["name"], sm.params.base, adapter)
MemberSpec(spec["name"], str(Path(sm.params.base).resolve()), adapter).write(sm.output.member)
