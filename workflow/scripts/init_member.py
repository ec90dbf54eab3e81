"""rule init_member: an initial member without SFT: its configured adapter, or the base alone."""

from pathlib import Path

from sparta.logs import setup
from sparta.members import RESULTS, MemberSpec, base_reference

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
member, base = sm.params.member, sm.params.base
adapter = str(Path(member["adapter"]).resolve()) if member["adapter"] else None
log.info("member %s: base %s, adapter %s", member["name"], base, adapter)
MemberSpec(member["name"], base_reference(base), adapter).write(sm.output.member, root=RESULTS)
