"""Host work per decoding step and per scoring forward, counted with the PyTorch profiler on
the CPU (no timing), on a tiny random Llama with random LoRA adapters:

    python benchmarks/bench_step.py [--rows 8 128] [--adapters 1 4] [--steps 2 6] [--library]

On a GPU every ATen operator is a kernel launch or a host-side op, and every tensor built
from Python data a host-to-device copy: a step whose operator count grows with its rows or
with its members is launch-bound at a large batch. Counted per batch size (rows) and number
of LoRA adapters mixed in the batch (PEFT's ``adapter_names``, as the backend serves a pool):

- ``ops``: ATen operator calls (every ``aten::`` event the profiler records, nested ones
  included);
- ``lifted``: tensors built from Python data. Every ``torch.tensor``, ``torch.as_tensor``
  and index by a Python list (``x[[0, 2]]``) goes through ``aten::lift_fresh`` exactly once,
  and nothing else does, so its count is the proxy;
- decoding (greedy and sampled): per step, the difference of a ``generate`` call of
  ``--steps`` long and one of short, divided by the steps between them (prefill and the
  call's own set-up cancel out); no token stops a row, so every row runs every step;
  ``in forward``: the part inside the model's forward. The sampler draws its random numbers
  for up to ``max_new_tokens`` steps at once (``hf.DRAW_AHEAD``), once in each call: the
  figure is a step's own work, without that draw (one ``exponential_`` per row per draw);
- scoring (expected mode, ``continuation_logprobs``: requests of a judge instruction each,
  ten one-token candidates, one batch): per model forward, and for the whole call.

Targets: no count grows with rows; with adapters, by at most a constant per LoRA layer (the
last column: the growth of greedy ops from the smallest adapter count, per LoRA layer and
extra adapter). Threads: 1.

``--library``: the same with PEFT's own mixed-adapter batches and one draw per row at every
step (``hf.ROW_INDEX`` off, ``hf.DRAW_AHEAD`` 1), the backend's paths before they changed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "tests"))

from tiny import build_tiny_model  # noqa: E402

from sparta.backends import hf, open_backend  # noqa: E402
from sparta.members import MemberSpec  # noqa: E402
from sparta.settings import BackendSettings, LoraSettings, Runtime, Sampling  # noqa: E402

FORWARD = "bench_step.forward"


def pool(folder: Path, adapters: int):
    """The backend with ``adapters`` random LoRA members of one tiny base (2 layers, hidden
    16), and the model holding them all."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = build_tiny_model(folder / "base", layers=2, hidden=16)
    specs = []
    for k in range(adapters):
        torch.manual_seed(k)
        cfg = LoraConfig(
            r=4, lora_alpha=8, target_modules=list(LoraSettings().target_modules), init_lora_weights=False
        )
        get_peft_model(AutoModelForCausalLM.from_pretrained(base), cfg).save_pretrained(folder / f"m{k}")
        specs.append(MemberSpec(f"m{k}", str(base), str(folder / f"m{k}")))
    backend = open_backend(BackendSettings("hf"), Runtime(device="cpu", dtype="float32"), specs)
    model, _ = backend._model(specs)
    return backend, specs, model


@contextlib.contextmanager
def quiet_stderr():
    """The profiler's native library prints two lines per profile on stderr: hidden."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def counted(model, fn) -> dict[str, int]:
    """ATen ops and lifted tensors while ``fn`` runs, in all and inside the model's forwards."""
    marks = []
    pre = model.register_forward_pre_hook(lambda m, a: marks.append(record_function(FORWARD).__enter__()))
    post = model.register_forward_hook(lambda m, a, o: marks.pop().__exit__(None, None, None))
    try:
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            fn()
    finally:
        pre.remove()
        post.remove()
    out = {"ops": 0, "lifted": 0, "forward_ops": 0, "forward_lifted": 0, "forwards": 0}
    for e in prof.events():
        if e.name == FORWARD:
            out["forwards"] += 1
        if not e.name.startswith("aten::"):
            continue
        inside = _inside_forward(e)
        lifted = e.name == "aten::lift_fresh"
        out["ops"] += 1
        out["lifted"] += lifted
        out["forward_ops"] += inside
        out["forward_lifted"] += inside and lifted
    return out


def _inside_forward(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == FORWARD:
            return True
        parent = parent.cpu_parent
    return False


def prompts_for(rows: int) -> list[list[int]]:
    """Distinct prompts of 8 to 12 tokens."""
    return [[5 + (7 * i + 3 * j) % 300 for j in range(8 + i % 5)] for i in range(rows)]


def decoding_step(backend, specs, model, rows: int, adapters: int, steps: tuple[int, int], sampled: bool):
    """Counts per decoding step: (long call - short call) / (steps between)."""
    tok = backend.tokenizer(specs[0])
    names = [backend.loader.adapter_name(specs[i % adapters]) for i in range(rows)]
    prompts, seeds = prompts_for(rows), list(range(rows))

    def call(n):
        sampling = Sampling(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=n)
        sampling = sampling if sampled else Sampling.greedy_decoding(n)
        return lambda: hf.generate(
            model, tok, prompts, sampling, seeds, batch_size=rows, desc="bench", adapter_names=names
        )

    stops, hf.stop_token_ids = hf.stop_token_ids, lambda tok: []  # no row ends: every step is full
    try:
        call(steps[0])()  # warm-up
        short, long = (counted(model, call(n)) for n in steps)
    finally:
        hf.stop_token_ids = stops
    return {k: (long[k] - short[k]) / (steps[1] - steps[0]) for k in long}


def scoring(backend, specs, model, rows: int, adapters: int):
    """Counts of one expected-mode scoring call of ``rows`` requests in one batch."""
    tok = backend.tokenizer(specs[0])
    names = [backend.loader.adapter_name(specs[i % adapters]) for i in range(rows)]
    stem = list(range(5, 5 + 2 * hf.SHARED_PREFIX_MIN))  # a judge's instruction, shared
    prompts = [stem + p for p in prompts_for(rows)]
    conts = [[[t] for t in range(20, 30)] for _ in range(rows)]  # "Score: 1" .. "Score: 10"

    def call():
        return hf.continuation_logprobs(
            model, tok.pad_token_id, prompts, conts, batch_size=rows, adapter_names=names
        )

    call()
    return counted(model, call)


def lora_layers(model) -> int:
    from peft.tuners.lora import LoraLayer

    return sum(isinstance(m, LoraLayer) for m in model.modules())


COLUMNS = [
    ("greedy", "ops"),
    ("greedy", "lifted"),
    ("greedy", "forward_ops"),
    ("sampled", "ops"),
    ("sampled", "lifted"),
    ("score/fwd", "forward_ops"),
    ("score/fwd", "forward_lifted"),
    ("score call", "ops"),
    ("score call", "lifted"),
]


def measure(args, backend, specs, model) -> dict[tuple[int, int], dict]:
    table = {}
    for rows in args.rows:
        for adapters in args.adapters:
            steps = tuple(args.steps)
            score = scoring(backend, specs, model, rows, adapters)
            per_forward = {k: score[k] / score["forwards"] for k in ("forward_ops", "forward_lifted")}
            table[rows, adapters] = {
                "greedy": decoding_step(backend, specs, model, rows, adapters, steps, False),
                "sampled": decoding_step(backend, specs, model, rows, adapters, steps, True),
                "score/fwd": per_forward,
                "score call": score,
            }
            print(f"  measured {rows} rows x {adapters} adapters", flush=True)
    return table


def report(table, layers: int) -> None:
    """The table, then each count's growth with rows and with adapters."""
    head = ["rows", "adapters"] + [f"{w} {k.replace('forward_', 'in fwd ')}" for w, k in COLUMNS]
    head.append("greedy ops per layer+adapter")
    print(" | ".join(head))
    print(" | ".join("---" for _ in head))
    fewest = min(a for _, a in table)
    for (rows, adapters), got in table.items():
        cells = [str(rows), str(adapters)] + [f"{got[w][k]:.1f}" for w, k in COLUMNS]
        more = adapters - fewest
        base = table[rows, fewest]["greedy"]["ops"]
        cells.append(f"{(got['greedy']['ops'] - base) / (layers * more):.1f}" if more else "-")
        print(" | ".join(cells))
    sizes = sorted({r for r, _ in table})
    for adapters in sorted({a for _, a in table}):
        grows = [
            f"{w} {k}"
            for w, k in COLUMNS
            if table[sizes[-1], adapters][w][k] > table[sizes[0], adapters][w][k] + 0.5
        ]
        print(f"{adapters} adapters, {sizes[0]} -> {sizes[-1]} rows, grows: {', '.join(grows) or 'nothing'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 128], help="rows of a batch")
    ap.add_argument("--adapters", type=int, nargs="+", default=[1, 4], help="adapters mixed in a batch")
    ap.add_argument("--steps", type=int, nargs=2, default=[2, 6], help="decoding steps of the two calls")
    ap.add_argument("--library", action="store_true", help="PEFT's own mixed batches, a draw per step")
    args = ap.parse_args()
    if args.library:
        hf.ROW_INDEX, hf.DRAW_AHEAD = False, 1
    from sparta.models import cpu_features

    torch.set_num_threads(1)
    print(f"cpu: {cpu_features()}, threads 1, torch {torch.__version__}, row index {hf.ROW_INDEX}")
    with tempfile.TemporaryDirectory() as tmp:
        backend, specs, model = pool(Path(tmp), max(args.adapters))
        layers = lora_layers(model)
        print(f"tiny Llama: 2 layers, hidden 16; {layers} LoRA layers, {len(specs)} adapters loaded")
        report(measure(args, backend, specs, model), layers)


if __name__ == "__main__":
    main()
