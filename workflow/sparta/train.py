"""Training a member: DPO on an iteration's preference pairs (TRL + PEFT), and the short
LoRA SFT that makes the embedded default's initial pool diverse.

DPO continues the member's own adapter; TRL copies that adapter into a frozen "ref" adapter,
so the reference policy is the member as it was at iteration t. A member without an adapter
gets a fresh LoRA, whose reference (adapters off) is the same base model.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd
import torch

from .members import MemberSpec, check_adapter_folder
from .models import load_base, load_tokenizer, pick_device, pick_dtype
from .settings import DPOSettings, LoraSettings, Runtime, SFTSettings

log = logging.getLogger(__name__)


def lora_config(lora: LoraSettings):
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def preference_dataset(prefs: pd.DataFrame, system: str | None):
    """Conversational DPO rows: the prompt as chat messages, chosen/rejected as assistant turns.
    TRL applies the model's chat template to them."""
    from datasets import Dataset

    sys = [{"role": "system", "content": system}] if system else []
    return Dataset.from_dict(
        {
            "prompt": [sys + [{"role": "user", "content": p}] for p in prefs["prompt"]],
            "chosen": [[{"role": "assistant", "content": c}] for c in prefs["chosen"]],
            "rejected": [[{"role": "assistant", "content": r}] for r in prefs["rejected"]],
        }
    )


def _trainable_member(spec: MemberSpec, lora: LoraSettings, device: str, dtype: str):
    from peft import PeftModel, get_peft_model

    dev = pick_device(device)
    base = load_base(spec.base, dev, pick_dtype(dtype, dev))
    if spec.adapter is None:
        return get_peft_model(base, lora_config(lora))
    check_adapter_folder(spec.adapter)
    return PeftModel.from_pretrained(base, spec.adapter, is_trainable=True)


def dpo_member(
    spec: MemberSpec,
    prefs: pd.DataFrame,
    out_dir: str | Path,
    params: DPOSettings,
    lora: LoraSettings,
    runtime: Runtime,
    seed: int,
) -> dict:
    """Train one member on all of an iteration's pairs; save its adapter under ``out_dir``.
    ``seed`` is this member's (derived from the run's seed); ``runtime`` gives device,
    dtype and the system prompt.

    Returns a summary (pairs, steps, final loss). With no pairs the adapter is copied
    unchanged, and the log says so.
    """
    from transformers import set_seed

    out_dir = Path(out_dir)
    adapter_dir = out_dir / "adapter"
    device, dtype = runtime.device, runtime.dtype
    if len(prefs) == 0:
        log.warning("member %s: no preference pairs this iteration; member unchanged", spec.name)
        if spec.adapter is not None:
            shutil.copytree(spec.adapter, adapter_dir, dirs_exist_ok=True)
        else:  # a fresh LoRA (B = 0) is the base itself; every checkpoint is then an adapter
            set_seed(seed)
            _trainable_member(spec, lora, device, dtype).save_pretrained(adapter_dir)
        return {"pairs": 0, "steps": 0, "adapter": str(adapter_dir)}

    from trl import DPOConfig, DPOTrainer

    set_seed(seed)  # before a fresh LoRA is initialised (its A matrices are random)
    tok = load_tokenizer(spec.base)
    tok.padding_side = "right"
    model = _trainable_member(spec, lora, device, dtype)
    args = DPOConfig(
        output_dir=str(out_dir / "trainer"),
        beta=params.beta,
        loss_type=[params.loss_type],
        learning_rate=params.learning_rate,
        lr_scheduler_type=params.lr_scheduler,
        warmup_steps=params.warmup_ratio,  # a float in [0, 1) is a ratio of total steps
        weight_decay=params.weight_decay,
        num_train_epochs=params.epochs,
        per_device_train_batch_size=params.batch_size,
        gradient_accumulation_steps=params.gradient_accumulation,
        max_length=params.max_length,
        seed=seed,
        data_seed=seed,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=pick_device(device).type == "cpu",
        bf16=pick_dtype(dtype, pick_device(device)) == torch.bfloat16,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=preference_dataset(prefs, runtime.system_prompt),
        processing_class=tok,
    )
    result = trainer.train()
    # save only the member's own adapter, not TRL's frozen "ref" copy
    trainer.model.save_pretrained(adapter_dir, selected_adapters=["default"])
    shutil.rmtree(out_dir / "trainer", ignore_errors=True)
    return {
        "pairs": len(prefs),
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
        "adapter": str(adapter_dir),
    }


def sft_member(
    name: str,
    base: str,
    examples: pd.DataFrame,
    out_dir: str | Path,
    params: SFTSettings,
    lora: LoraSettings,
    runtime: Runtime,
) -> dict:
    """LoRA SFT of ``base`` on ``examples`` (columns prompt, response); saves the adapter."""
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    seed, system = runtime.seed, runtime.system_prompt
    set_seed(seed)
    if len(examples) == 0:
        raise ValueError(f"member {name}: the SFT data is empty")
    out_dir = Path(out_dir)
    tok = load_tokenizer(base)
    tok.padding_side = "right"
    dev = pick_device(runtime.device)
    model = load_base(base, dev, pick_dtype(runtime.dtype, dev))
    sys = [{"role": "system", "content": system}] if system else []
    data = Dataset.from_dict(
        {
            "messages": [
                sys + [{"role": "user", "content": p}, {"role": "assistant", "content": r}]
                for p, r in zip(examples["prompt"], examples["response"])
            ]
        }
    )
    args = SFTConfig(
        output_dir=str(out_dir / "trainer"),
        max_steps=params.max_steps,
        learning_rate=params.learning_rate,
        lr_scheduler_type=params.lr_scheduler,
        warmup_steps=params.warmup_ratio,  # a float in [0, 1) is a ratio of total steps
        per_device_train_batch_size=params.batch_size,
        max_length=params.max_length,
        assistant_only_loss=False,
        seed=seed,
        data_seed=seed,
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        use_cpu=dev.type == "cpu",
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tok, peft_config=lora_config(lora)
    )
    result = trainer.train()
    adapter_dir = out_dir / "adapter"
    trainer.model.save_pretrained(adapter_dir)
    shutil.rmtree(out_dir / "trainer", ignore_errors=True)
    return {
        "examples": len(examples),
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
    }
