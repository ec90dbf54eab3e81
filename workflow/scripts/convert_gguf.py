"""rule convert_gguf: GGUF in a package -> safetensors folder."""

from sparta.logs import setup

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)

from sparta.models import convert_gguf  # noqa: E402

convert_gguf(sm.params.spec["gguf_package"], sm.params.spec["gguf_file"], sm.params.folder)
log.info("converted %s to %s", sm.params.spec["gguf_file"], sm.params.folder)
