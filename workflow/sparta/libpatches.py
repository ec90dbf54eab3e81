"""Everything sparta replaces in, or reads privately from, PEFT, transformers and TRL.

:data:`PATCHES` lists each use (docs/development/private-apis.md: why, the gain, what breaks;
tests/test_private_apis.py: a guard per use). The HF backend and the DPO trainer call
:func:`install` when first used; on a library version not in :data:`TESTED` it warns once
which uses may not hold. ``SPARTA_LIBRARY_PATCHES=plain`` turns off every use that has a
switch, running the libraries as they ship with the same tables; the required ones stay.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from importlib.metadata import version
from importlib.util import find_spec

log = logging.getLogger(__name__)

VARIABLE = "SPARTA_LIBRARY_PATCHES"
MODES = ("on", "plain")
# major.minor versions the uses were tested with: requirements.txt, envs/vllm.yaml's transformers
TESTED = {"transformers": ("5.19", "5.20", "5.24"), "peft": ("0.21",), "trl": ("1.16",)}


@dataclass(frozen=True)
class Patch:
    name: str
    library: str
    uses: str  # what it replaces or reads
    gives: str  # what may not hold on an untested version
    switch: str = ""  # module.CONSTANT that turns it off alone; "": required, kept under plain


PATCHES = (
    Patch(
        "roomy_cache",
        "transformers",
        "subclasses cache_utils.DynamicLayer (RoomyLayer), set as DynamicCache.layer_class_to_replicate",
        "decoding writes each step into room kept in the cache instead of copying it (1.44x)",
        "sparta.backends.hf.ROOMY_CACHE",
    ),
    Patch(
        "own_decoding",
        "transformers",
        "hf._decode: the forward's cache, logits_to_keep and position_ids, Cache.batch_select_indices",
        "finished rows leave the batch, answers as generate's (1.32x)",
        "sparta.backends.hf.OWN_DECODING",
    ),
    Patch(
        "shared_prompts",
        "transformers",
        "generate continuing a prefilled cache with padding in the middle (hf._prefilled)",
        "a batch's shared prompt start computed once per adapter (1.48x)",
        "sparta.backends.hf.SHARE_PROMPTS",
    ),
    Patch(
        "kv_cache_name",
        "transformers",
        "the forward's KV cache argument, read off CausalLMOutputWithPast (hf.CACHE)",
        "decoding with a cache at all (a wrong name is swallowed by the forward's **kwargs)",
    ),
    Patch(
        "row_index",
        "peft",
        "replaces lora.Linear._mixed_batch_forward, reading the layer's LoRA attributes",
        "each adapter's rows indexed once per batch, not in every LoRA layer, answers as PEFT's",
        "sparta.backends.hf.ROW_INDEX",
    ),
    Patch(
        "pair_tree",
        "trl",
        "overrides DPOTrainer._compute_loss, compute_ref_log_probs; FusedCausalLMOutput, its kernel",
        "a DPO pair as one tree row, its prompt once (1.61x), the loss as TRL's",
        "sparta.pair_tree.PAIR_TREE",
    ),
    Patch(
        "sppo_columns",
        "transformers",
        "overrides Trainer._set_signature_columns_if_needed, extends self._signature_columns",
        "SPPO's win probabilities reach its loss (without: the official SPPO loss cannot train)",
    ),
    Patch(
        "sppo_trainer",
        "trl",
        "DPOTrainer._metrics, precompute_ref_logps, ref_model, beta; its DataCollatorForPreference",
        "SPPO's loss and logged metrics (without: no SPPO)",
    ),
)


def mode() -> str:
    """``on`` (the default) or ``plain``, from the environment variable :data:`VARIABLE`."""
    value = os.environ.get(VARIABLE, "").strip().lower() or "on"
    if value not in MODES:
        raise ValueError(f"sparta: {VARIABLE}={value!r}: use plain (the libraries as shipped) or on")
    return value


def library_versions() -> dict[str, str]:
    """The installed version of each library of :data:`TESTED` (those installed)."""
    return {library: version(library) for library in TESTED if find_spec(library)}


def version_warning(versions: dict[str, str], plain: bool = False) -> str | None:
    """What may not hold on these library ``versions`` (None: all tested). ``plain``: only
    the required uses are in force."""
    untested = {lib: v for lib, v in versions.items() if ".".join(v.split(".")[:2]) not in TESTED[lib]}
    at_risk = [p for p in PATCHES if p.library in untested and not (plain and p.switch)]
    if not at_risk:
        return None
    tested = "; ".join(f"{lib} {', '.join(TESTED[lib])}" for lib in untested)
    found = ", ".join(f"{lib} {v}" for lib, v in untested.items())
    return "\n".join(
        [
            f"sparta: warning: sparta's uses of library internals were tested with {tested}; "
            f"this is {found}. These may not hold here:",
            *[f"  {p.name} ({p.library}): {p.gives}" for p in at_risk],
            "Install the tested versions (requirements.txt), or run the libraries as shipped: "
            f"{VARIABLE}=plain (docs/development/private-apis.md).",
        ]
    )


_state: dict = {}


def install() -> bool:
    """Install every use for this process, once: warn about untested versions; under
    ``plain`` set every switch of :data:`PATCHES` to False and replace nothing (return False),
    else route PEFT's mixed-batch LoRA forward through :func:`rows_forward`."""
    if "plain" in _state:
        return not _state["plain"]
    plain = _state["plain"] = mode() == "plain"
    warning = version_warning(library_versions(), plain)
    if warning:
        log.warning(warning)
    if plain:
        for p in PATCHES:
            if p.switch:
                module, name = p.switch.rsplit(".", 1)
                setattr(importlib.import_module(module), name, False)
        log.info("%s=plain: PEFT, transformers and TRL run as shipped", VARIABLE)
        return False
    from peft.tuners.lora import layer

    _PEFT["variant_keys"] = tuple(getattr(layer, "VARIANT_KWARG_KEYS", ("alora_offsets",)))
    _PEFT["forward"] = layer.Linear._mixed_batch_forward
    layer.Linear._mixed_batch_forward = rows_forward
    return True


_PEFT: dict = {}  # PEFT's own mixed-batch method and the variant arguments it takes


def rows_forward(self, x, *args, adapter_names, **kwargs):
    """PEFT's ``lora.Linear._mixed_batch_forward`` with the rows of
    :class:`sparta.backends.hf.AdapterRows` (``index_select`` and ``index_add_``, the same
    sums); anything else (plain names, a LoRA variant, variant arguments) goes to PEFT's."""
    rows = getattr(adapter_names, "rows", None)
    variant = any(kwargs.get(k) is not None for k in _PEFT["variant_keys"])
    if rows is None or self.lora_variant or variant:
        return _PEFT["forward"](self, x, *args, adapter_names=adapter_names, **kwargs)
    kwargs = {k: v for k, v in kwargs.items() if k not in _PEFT["variant_keys"]}
    result = self.base_layer(x, *args, **kwargs)
    for name, index in rows.items():
        if name not in self.lora_A:  # the base's rows ("__base__"), or no LoRA of it here
            continue
        lora_A, lora_B = self.lora_A[name], self.lora_B[name]
        sub = x if index is None else x.index_select(0, index)
        out = lora_B(lora_A(self.lora_dropout[name](sub.to(lora_A.weight.dtype)))) * self.scaling[name]
        if index is None:
            result += out.to(result.dtype)
        else:
            result.index_add_(0, index, out.to(result.dtype))
    return result
