"""rule init_hub_member: an initial member whose base or adapter is an hf:// hub id. Its
member.json keeps the ids; the manifest must hold them, with the right kind of repo."""

from sparta import hub
from sparta.logs import setup
from sparta.members import RESULTS, MemberSpec, base_reference

sm = snakemake  # noqa: F821
log = setup(sm.log[0])
member, base = sm.params.member, sm.params.base
adapter = member["adapter"]
manifest = hub.read_manifest(sm.input.hub[0])
for value, want in ((base, "model"), (adapter, "adapter")):
    if hub.is_ref(value):
        row = manifest.get(value)
        if row is None:
            raise hub.HubError(f"member {member['name']}: {value} is not in the manifest {sm.input.hub[0]}")
        if row["kind"] != want:
            raise hub.HubError(f"member {member['name']}: {value} holds a {row['kind']}, not a {want}")
        log.info("%s: %s at commit %s", value, row["repo"], row["commit"])
if adapter is not None and not hub.is_ref(adapter):
    from pathlib import Path

    adapter = str(Path(adapter).resolve())
log.info("member %s: base %s, adapter %s", member["name"], base, adapter)
MemberSpec(member["name"], base_reference(base), adapter).write(sm.output.member, root=RESULTS)
