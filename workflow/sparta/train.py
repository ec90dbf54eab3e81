"""Training a member: DPO on an iteration's preference pairs (TRL + PEFT), continuing the
member's own adapter (TRL's frozen "ref" copy of it is the reference policy; a member without
one gets a fresh LoRA), and the short LoRA SFT that makes the embedded initial pool diverse.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from .files import follow_umask
from .members import MemberSpec, check_adapter_folder
from .models import load_base, load_tokenizer, native_bf16, pick_device, pick_dtype
from .progress import Progress, guard
from .settings import DPOSettings, LoraSettings, Runtime, SFTSettings

log = logging.getLogger(__name__)


class PrecisionError(ValueError):
    """The run's dtype cannot train on this device."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def trainer_precision(device: torch.device, dtype: torch.dtype) -> dict:
    """The trainer arguments of the run's precision, every one set explicitly: fp32 trains in
    fp32 (TRL leaves ``bf16`` unset, which transformers resolves to bf16 autocast wherever bf16
    is merely available: 9x slower on a CPU without native bf16), bf16 only where the device
    computes it natively, fp16 only on CUDA; anything else is an error naming the fix."""
    cpu = device.type == "cpu"
    args = {"use_cpu": cpu, "bf16": False, "fp16": False, "dataloader_pin_memory": device.type == "cuda"}
    if dtype == torch.float32:
        return args
    if dtype == torch.bfloat16:
        if not native_bf16(device):
            what = (
                "this CPU has no native bf16 (AVX512_BF16, AMX or Arm BF16)"
                if cpu
                else f"{device} has no bf16"
            )
            raise PrecisionError(
                f"dtype bfloat16 cannot train at full speed here: {what}, so bf16 would be emulated",
                "set dtype: auto (fp32 on CPU, bf16 on a GPU that has it) or float32",
            )
        return {**args, "bf16": True}
    if dtype == torch.float16:
        if device.type != "cuda":
            raise PrecisionError(
                f"dtype float16 trains only on a CUDA GPU (device here: {device.type})",
                "set dtype: auto or float32 for CPU runs",
            )
        return {**args, "fp16": True}
    raise PrecisionError(
        f"dtype {dtype} is not a training precision", "set dtype: auto, float32, bfloat16 or float16"
    )


def common_trainer_args(device: torch.device, dtype: torch.dtype, seed: int, out_dir: Path) -> dict:
    """What every sparta trainer sets itself rather than inherit from a library default:
    precision, logging every step (the training_log table), no checkpoints by the trainer
    (sparta saves the adapter), no dataloader workers, one process, the seeds."""
    return {
        "output_dir": str(out_dir / "trainer"),
        **trainer_precision(device, dtype),
        "seed": seed,
        "data_seed": seed,
        "logging_steps": 1,
        "save_strategy": "no",
        "dataloader_num_workers": 0,
        "average_tokens_across_devices": False,
        "torch_compile": False,
        "disable_tqdm": False,  # a bar on the terminal; the job log gets progress_callback's lines
    }


# False: no GPU options beyond the libraries' defaults (bench_dpo.py --gpu-defaults compares)
GPU_SPEED = True
# the reference pass's batch on a GPU, in training batches (no gradients: a larger batch fits)
GPU_REF_BATCHES = 4


def gpu_dpo_args(device: torch.device, batch_size: int) -> dict:
    """DPOConfig fields for speed on a CUDA GPU; none elsewhere. The rest of the fast path
    needs no field (bf16 comes with ``dtype: auto``, TRL's chunked head keeps bf16, fused AdamW
    is the default); ``padding_free`` stays off: TRL 1.16's DPO ignores it."""
    if device.type != "cuda" or not GPU_SPEED:
        return {}
    return {"precompute_ref_batch_size": GPU_REF_BATCHES * batch_size}


def gpu_attention(model, device: torch.device) -> None:
    """On a CUDA GPU, PyTorch's fused attention (SDPA) where the model has it; elsewhere the
    model keeps its own. Not flash-attention 2: it takes no 4-D mask, which the pair tree
    (sparta.pair_tree) hands the model."""
    if device.type != "cuda" or not GPU_SPEED:
        return
    try:
        model.set_attn_implementation("sdpa")
    except ValueError as e:  # a model without SDPA keeps its own
        log.warning("DPO keeps the model's own attention, not SDPA: %s", e)


def progress_callback(stage: str, member: str):
    """A trainer callback writing progress to the job's log (step, loss, steps/s, elapsed):
    every step for the first few, then about every 2% of the run and at the end."""
    from transformers import TrainerCallback

    class ProgressLog(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()
            log.info("%s %s: training %d steps", stage, member, state.max_steps)

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            step, total = state.global_step, max(state.max_steps, 1)
            every = max(1, total // 50)
            if "loss" not in logs or not (step <= 5 or step % every == 0 or step == total):
                return
            elapsed = time.perf_counter() - self.start
            rate = step / elapsed if elapsed > 0 else 0.0
            log.info(
                f"{stage} {member}: step {step}/{total} loss {float(logs['loss']):.4f}, "
                f"{rate:.2f} steps/s, {elapsed:.0f} s elapsed"
            )

    return ProgressLog()


def lora_config(lora: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def preference_dataset(prefs: pd.DataFrame, system: str | None, win_probs: bool = False):
    """Conversational DPO rows (prompt as chat messages, chosen/rejected as assistant turns);
    ``win_probs``: SPPO's estimated win probabilities too, from the pairs' scores (1 + 9 P)."""
    from datasets import Dataset

    sys = [{"role": "system", "content": system}] if system else []
    rows = {
        "prompt": [sys + [{"role": "user", "content": p}] for p in prefs["prompt"]],
        "chosen": [[{"role": "assistant", "content": c}] for c in prefs["chosen"]],
        "rejected": [[{"role": "assistant", "content": r}] for r in prefs["rejected"]],
    }
    if win_probs:
        rows["win_prob_chosen"] = [(s - 1) / 9 for s in prefs["chosen_score"]]
        rows["win_prob_rejected"] = [(s - 1) / 9 for s in prefs["rejected_score"]]
    return Dataset.from_dict(rows)


def fitting_pairs(prefs: pd.DataFrame, tok, system: str | None, max_length: int) -> pd.DataFrame:
    """The pairs whose prompt (chat template and generation prompt) is shorter than
    ``max_length`` tokens: TRL drops the others, and a member left with none would stop the
    trainer (meta-rewarding's judge pairs, whose prompt is the whole judge instruction)."""
    from .chat import chat_ids

    if len(prefs) == 0:
        return prefs
    fits = [len(chat_ids(tok, p, system)) < max_length for p in prefs["prompt"]]
    return prefs[fits].reset_index(drop=True)


def cut_pairs(prefs: pd.DataFrame, tok, system: str | None, max_length: int) -> int:
    """How many pairs have an answer (chosen or rejected) that ``max_length`` cuts: the
    trainer keeps the prompt and drops the answer's end, for a judge pair its "Score: N"."""
    from .chat import chat_ids

    cut = 0
    for prompt, *texts in zip(prefs["prompt"], prefs["chosen"], prefs["rejected"]):
        room = max_length - len(chat_ids(tok, prompt, system))
        longest = max(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)
        cut += longest + 1 > room  # the end-of-turn token closes every answer
    return cut


def pairs_of(prefs: pd.DataFrame, member: str) -> pd.DataFrame:
    """The pairs a member trains on: every pair (Sparta: no trainee) or its own (a baseline)."""
    if "trainee" not in prefs:
        return prefs
    return prefs[prefs["trainee"].isna() | (prefs["trainee"] == member)].reset_index(drop=True)


def sppo_loss(logratio_w, logratio_l, p_w, p_l, eta: float):
    """SPPO's loss per pair as the official trainer computes it (uclaml/SPPO, the mean of the
    two squared terms; Wu et al. 2024, eq. 4.7, their sum), eta = 1/beta of their trainer:
    ((log pi/pi_ref(y_w) - eta (P_w - 1/2))^2 + (log pi/pi_ref(y_l) - eta (P_l - 1/2))^2) / 2.
    With P_w = 1, P_l = 0 it is half of TRL's sppo_hard with beta = 1/eta."""
    return ((logratio_w - eta * (p_w - 0.5)) ** 2 + (logratio_l - eta * (p_l - 0.5)) ** 2) / 2


def sppo_trainer():
    """TRL's DPOTrainer with :func:`sppo_loss` on estimated win probabilities, eta = 1 /
    the trainer's beta. Built on first use: TRL is imported only by training jobs."""
    from trl import DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    from .pair_tree import with_pair_tree

    extra = ("win_prob_chosen", "win_prob_rejected")
    not_model = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps", *extra}

    class Collator(DataCollatorForPreference):
        def torch_call(self, examples):
            out = super().torch_call(examples)
            for k in extra:
                out[k] = torch.tensor([float(e[k]) for e in examples], dtype=torch.float32)
            return out

    class SPPOTrainer(with_pair_tree(DPOTrainer)):
        def _set_signature_columns_if_needed(self):  # keep the probabilities in the batches
            super()._set_signature_columns_if_needed()
            kept = list(self._signature_columns)
            self._signature_columns = kept + [c for c in extra if c not in kept]

        def compute_ref_log_probs(self, model, inputs):
            return super().compute_ref_log_probs(model, {k: v for k, v in inputs.items() if k not in extra})

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            completion_mask = inputs["completion_mask"]
            kwargs = {k: v for k, v in inputs.items() if k not in not_model}
            labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
            out = self.pair_model(model)(**kwargs, use_cache=False, labels=labels, fused_lm_head=True)
            logps = out.log_probs[:, -(completion_mask.size(1) - 1) :].sum(dim=1)
            chosen, rejected = logps.chunk(2, dim=0)  # the batch is [chosen..., rejected...]
            if self.precompute_ref_logps:
                ref_c, ref_r = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
            else:
                ref_c, ref_r = self.compute_ref_log_probs(self.ref_model or self.model, inputs)
            lr_c, lr_r = chosen - ref_c, rejected - ref_r
            p_w, p_l = inputs["win_prob_chosen"].to(lr_c.dtype), inputs["win_prob_rejected"].to(lr_c.dtype)
            loss = sppo_loss(lr_c, lr_r, p_w, p_l, 1 / self.beta).mean()
            metrics = self._metrics["train" if self.model.training else "eval"]  # TRL's metric names
            rc, rr = self.beta * lr_c.detach(), self.beta * lr_r.detach()
            rewards = {"chosen": rc, "rejected": rr, "margins": rc - rr, "accuracies": (rc > rr).float()}
            answers = {"chosen": chosen.detach(), "rejected": rejected.detach()}
            for prefix, values in (("rewards", rewards), ("logps", answers)):
                for k, value in values.items():
                    metrics[f"{prefix}/{k}"].append(self.accelerator.gather(value).mean().item())
            return (loss, out) if return_outputs else loss

    return SPPOTrainer, Collator


class TrainableMembers:
    """Members made trainable one after another on one base load: each gets its adapter (or a
    fresh LoRA) as PEFT's "default" adapter, trains, and is detached again."""

    def __init__(self, lora: LoraSettings, runtime: Runtime):
        self.lora, self.runtime = lora, runtime
        self.device = pick_device(runtime.device)
        self.dtype = pick_dtype(runtime.dtype, self.device)
        trainer_precision(self.device, self.dtype)  # a dtype that cannot train stops before any load
        self.base: str | None = None
        self.model = None

    def attach(self, spec: MemberSpec, seed: int):
        """The PEFT model with ``spec``'s adapter (or a fresh LoRA, seeded) as "default"."""
        from peft import PeftModel, get_peft_model
        from transformers import set_seed

        if spec.base != self.base:
            self.model, self.base = load_base(spec.base, self.device, self.dtype), spec.base
            gpu_attention(self.model, self.device)
        adapter = None if spec.adapter is None else str(check_adapter_folder(spec.adapter))
        set_seed(seed)
        if not isinstance(self.model, PeftModel):
            if adapter is None:
                self.model = get_peft_model(self.model, lora_config(self.lora))
            else:
                self.model = PeftModel.from_pretrained(self.model, adapter, is_trainable=True)
        elif adapter is None:
            self.model.add_adapter("default", lora_config(self.lora))
        else:
            self.model.load_adapter(adapter, adapter_name="default", is_trainable=True)
        self.model.set_adapter("default")
        return self.model

    def detach(self) -> None:
        """Drop the member's adapter and TRL's frozen "ref" copy of it; the base stays."""
        for name in ("ref", "default"):
            if name in self.model.peft_config:
                self.model.delete_adapter(name)


@dataclass(frozen=True)
class Tracking:
    """Where a trainer reports (``report_to``: tensorboard, wandb, ...; empty: nowhere)."""

    report_to: tuple[str, ...] = ()
    project: str | None = None
    run_name: str | None = None
    logging_dir: str | None = None

    def args(self, member: str) -> dict:
        if not self.report_to:
            return {"report_to": []}
        if "tensorboard" in self.report_to and self.logging_dir:
            os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(Path(self.logging_dir) / member))
        out = {"report_to": list(self.report_to), "run_name": f"{self.run_name or 'sparta'}/{member}"}
        if self.project:
            out["project"] = self.project
        return out


LOGGED = tuple(
    "loss grad_norm learning_rate rewards/chosen rewards/rejected rewards/accuracies rewards/margins "
    "logps/chosen logps/rejected train_loss train_runtime".split()
)


def progress(folder: Path, inputs: list) -> tuple[Progress, str | None]:
    """This attempt's claim on ``folder`` (the trainer folder, kept when the job reruns) and the
    last progress a DPO job saved there for these same ``inputs``, or None; a folder kept for
    other inputs is emptied (:class:`sparta.progress.Progress`)."""
    kept = Progress(folder, inputs)
    # a save is complete once the trainer wrote its state, last (a killed save stays partial)
    saves = sorted(
        (p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").is_file()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    return kept, str(saves[-1]) if saves else None


def save_every(minutes: float):
    """A trainer callback saving the training state at the first step after every ``minutes``."""
    from transformers import TrainerCallback

    class SaveEvery(TrainerCallback):
        last = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.last >= minutes * 60:
                control.should_save, self.last = True, time.monotonic()
            return control

    return SaveEvery()


def training_log(history: list[dict], member: str, iteration: int, stage: str, examples: int) -> pd.DataFrame:
    """A trainer's log history as a training_log table: a row per logged step and the summary."""
    rows = []
    for entry in history:
        row = {"member": member, "iteration": iteration, "stage": stage, "examples": examples}
        row["step"] = int(entry.get("step", 0))
        row["epoch"] = float(entry.get("epoch", float("nan")))
        row.update({k.replace("/", "_"): float(entry[k]) for k in LOGGED if k in entry})
        rows.append(row)
    return pd.DataFrame(rows)


def dpo_members(
    members: list[tuple[MemberSpec, Path, int]],
    prefs: pd.DataFrame,
    params: DPOSettings,
    lora: LoraSettings,
    runtime: Runtime,
    tracking: Tracking = Tracking(),
    *,
    loss: str = "dpo",
    sppo_eta: float = 1000.0,
) -> list[dict]:
    """DPO of each (member, output folder, seed) on its pairs of the iteration, one after another
    on one base load, each adapter saved under ``<output folder>/adapter``; the reference policy
    is the member as it enters. A member without pairs is saved unchanged (or as a fresh LoRA).
    ``loss`` sppo or sppo_hard trains with beta = 1 / ``sppo_eta``. One summary per member."""
    job = _DPOJob(TrainableMembers(lora, runtime), params, runtime, tracking, loss, sppo_eta)
    summaries, everyone = [], prefs
    tok = tok_base = None
    for spec, out_dir, seed in members:
        prefs = pairs_of(everyone, spec.name)
        if len(prefs) and tok_base != spec.base:
            tok, tok_base = load_tokenizer(spec.base), spec.base
            tok.padding_side = "right"
        if len(prefs):
            prefs = _fitting(prefs, tok, spec.name, runtime.system_prompt, params.max_length)
        if len(prefs) == 0:
            log.warning("member %s: no preference pairs this iteration; member unchanged", spec.name)
            summaries.append(job.unchanged(spec, seed, Path(out_dir) / "adapter"))
        else:
            summaries.append(job.train(spec, seed, Path(out_dir), prefs, tok))
    return summaries


def _fitting(prefs: pd.DataFrame, tok, member: str, system: str | None, max_length: int) -> pd.DataFrame:
    """The pairs whose prompt leaves room for an answer within ``max_length``, with warnings."""
    fitting = fitting_pairs(prefs, tok, system, max_length)
    n, kept = len(prefs), len(fitting)
    if kept < n:
        log.warning(
            f"member {member}: {n - kept} of {n} pairs left out: their prompt alone fills "
            f"dpo.max_length {max_length}"
        )
    cut = cut_pairs(fitting, tok, system, max_length) if kept else 0
    if cut:
        log.warning(
            f"member {member}: {cut} of {kept} pairs have an answer cut at dpo.max_length {max_length} "
            "(its end, a judgment's score included, goes untrained): raise dpo.max_length"
        )
    return fitting


@dataclass
class _DPOJob:
    """What the members of one DPO job share: the base loaded once, the settings, the loss."""

    trainable: TrainableMembers
    params: DPOSettings
    runtime: Runtime
    tracking: Tracking
    loss: str
    sppo_eta: float

    def unchanged(self, spec: MemberSpec, seed: int, adapter_dir: Path) -> dict:
        """A member without pairs saved as it is: its adapter copied, or (none) a fresh LoRA."""
        if spec.adapter is not None:
            shutil.copytree(check_adapter_folder(spec.adapter), adapter_dir, dirs_exist_ok=True)
        else:
            self.trainable.attach(spec, seed).save_pretrained(adapter_dir, selected_adapters=["default"])
            self.trainable.detach()
        follow_umask(adapter_dir)
        return {"pairs": 0, "steps": 0, "adapter": str(adapter_dir), "log_history": []}

    def args(self, name: str, seed: int, out_dir: Path):
        """TRL's DPOConfig of one member: the dpo settings, precision and seed, beta = 1 /
        ``sppo_eta`` for SPPO's losses, on a CUDA GPU :func:`gpu_dpo_args`."""
        from trl import DPOConfig

        params, loss = self.params, self.loss
        return DPOConfig(
            **common_trainer_args(self.trainable.device, self.trainable.dtype, seed, out_dir),
            beta=1 / self.sppo_eta if loss in ("sppo", "sppo_hard") else params.beta,
            loss_type=["sppo_hard" if loss == "sppo_hard" else params.loss_type],
            learning_rate=params.learning_rate,
            lr_scheduler_type=params.lr_scheduler,
            warmup_steps=params.warmup_ratio,  # a float in [0, 1) is a ratio of total steps
            weight_decay=params.weight_decay,
            num_train_epochs=params.epochs,
            per_device_train_batch_size=params.batch_size,
            gradient_accumulation_steps=params.gradient_accumulation,
            gradient_checkpointing=params.gradient_checkpointing,
            max_length=params.max_length,
            save_total_limit=1,  # the last progress save only (save_every)
            precompute_ref_log_probs=True,
            disable_dropout=True,  # TRL's default, stated: the LoRA dropout is off in DPO
            padding_free=False,
            **gpu_dpo_args(self.trainable.device, params.batch_size),
            **self.tracking.args(name),
        )

    def train(self, spec: MemberSpec, seed: int, out_dir: Path, prefs: pd.DataFrame, tok) -> dict:
        """Train one member on its pairs and save its adapter under ``<out_dir>/adapter``."""
        from transformers import set_seed
        from trl import DPOTrainer

        from .pair_tree import with_pair_tree

        adapter_dir = out_dir / "adapter"
        model = self.trainable.attach(spec, seed)
        args = self.args(spec.name, seed, out_dir)
        same = {k: v for k, v in args.to_dict().items() if k not in ("logging_dir", "run_name", "output_dir")}
        kept, resume = progress(Path(args.output_dir), [spec, seed, self.loss, same, prefs.to_json()])
        set_seed(seed)
        extra, sppo, trainer_class = {}, self.loss == "sppo", with_pair_tree(DPOTrainer)
        if sppo:
            trainer_class, collator = sppo_trainer()
            extra["data_collator"] = collator(
                pad_token_id=tok.pad_token_id, max_length=self.params.max_length
            )
        trainer = trainer_class(
            model=model,
            args=args,
            train_dataset=preference_dataset(prefs, self.runtime.system_prompt, win_probs=sppo),
            processing_class=tok,
            callbacks=[
                progress_callback("DPO" if self.loss == "dpo" else self.loss.upper(), spec.name),
                *([save_every(self.params.save_minutes)] if self.params.save_minutes else []),
                guard(kept),  # a copy that outlived its time limit stops (sparta.progress)
            ],
            **extra,
        )
        log.info("%s: %d pairs; reference log-probabilities first, then training", spec.name, len(prefs))
        if resume:
            log.info("%s: continuing from the progress saved in %s", spec.name, resume)
        result = trainer.train(resume_from_checkpoint=resume)
        # save only the member's own adapter, not TRL's frozen "ref" copy
        kept.check()
        model.save_pretrained(adapter_dir, selected_adapters=["default"])
        follow_umask(adapter_dir)
        shutil.rmtree(out_dir / "trainer", ignore_errors=True)
        self.trainable.detach()
        # the mean loss of every step (the trainer's training_loss counts the steps since a resume)
        history = list(trainer.state.log_history)
        losses = [e["loss"] for e in history if "loss" in e]
        train_loss = sum(losses) / len(losses) if losses else float(result.training_loss)
        if history and "train_loss" in history[-1]:
            history[-1] = {**history[-1], "train_loss": train_loss}
        return {
            "pairs": len(prefs),
            "steps": int(result.global_step),
            "train_loss": float(train_loss),
            "adapter": str(adapter_dir),
            "log_history": history,
        }


def sft_member(
    spec: MemberSpec,
    examples: pd.DataFrame,
    out_dir: str | Path,
    params: SFTSettings,
    lora: LoraSettings,
    runtime: Runtime,
    *,
    tracking: Tracking = Tracking(),
) -> dict:
    """LoRA SFT of the member's base on ``examples`` (columns prompt, response); saves the
    adapter. Returns a summary with the trainer's log history."""
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    name, base, seed, system = spec.name, spec.base, runtime.seed, runtime.system_prompt
    set_seed(seed)
    if len(examples) == 0:
        raise ValueError(f"member {name}: the SFT data is empty")
    out_dir = Path(out_dir)
    tok = load_tokenizer(base)
    tok.padding_side = "right"
    where = TrainableMembers(lora, runtime)  # device and dtype; one that cannot train stops here
    model = load_base(base, where.device, where.dtype)
    args = SFTConfig(
        **common_trainer_args(where.device, where.dtype, seed, out_dir),
        max_steps=params.max_steps,
        learning_rate=params.learning_rate,
        lr_scheduler_type=params.lr_scheduler,
        warmup_steps=params.warmup_ratio,  # a float in [0, 1) is a ratio of total steps
        per_device_train_batch_size=params.batch_size,
        max_length=params.max_length,
        assistant_only_loss=False,
        packing=False,
        padding_free=False,
        loss_type="nll",
        **tracking.args(name),
        gradient_checkpointing=params.gradient_checkpointing,
    )
    sys = [{"role": "system", "content": system}] if system else []
    chats = [  # TRL's conversational dataset, with the system prompt
        sys + [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
        for p, r in zip(examples["prompt"], examples["response"])
    ]
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"messages": chats}),
        processing_class=tok,
        peft_config=lora_config(lora),
        callbacks=[progress_callback("SFT", name)],
    )
    result = trainer.train()
    adapter_dir = out_dir / "adapter"
    trainer.model.save_pretrained(adapter_dir)
    follow_umask(adapter_dir)
    shutil.rmtree(out_dir / "trainer", ignore_errors=True)
    return {
        "examples": len(examples),
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
        "log_history": list(trainer.state.log_history),
    }
