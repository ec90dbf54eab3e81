"""SFT and DPO of one member on a tiny random model: what must change does, the rest doesn't."""

import hashlib
import shutil

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from sparta.data import sft_examples
from sparta.members import MemberSpec
from sparta.settings import DPOSettings, LoraSettings, Runtime, SFTSettings
from sparta.train import sft_member

from .helpers import dpo_member
from .tiny import build_tiny_model

CPU = Runtime(device="cpu", system_prompt=None)
CPU_SYS = Runtime(device="cpu", system_prompt="sys")


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sft_adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    base = build_tiny_model(root / "base")
    summary = sft_member(
        MemberSpec("ann", str(base)),
        sft_examples("addition", 8, 0),
        root / "ann",
        SFTSettings(max_steps=2, batch_size=4),
        LoraSettings(),
        Runtime(seed=0, device="cpu", system_prompt="sys"),
    )
    assert summary["steps"] == 2
    return base, root / "ann" / "adapter"


PAIRS = pd.DataFrame(
    {
        "prompt": ["What is 3 + 4?", "What is 2 * 5?"],
        "chosen": ["3 + 4 = 7. The answer is 7.", "2 * 5 = 10. The answer is 10."],
        "rejected": ["It is 9.", "It is 25."],
    }
)


def test_sft_moves_lora_b_from_zero(sft_adapter):
    _, adapter = sft_adapter
    weights = load_file(adapter / "adapter_model.safetensors")
    b = [v for k, v in weights.items() if "lora_B" in k]
    assert b and any(v.abs().sum() > 0 for v in b)  # LoRA's init leaves B = 0


def test_dpo_continues_the_adapter_and_leaves_the_base(sft_adapter, tmp_path):
    base, adapter = sft_adapter
    base_digest = digest(base / "model.safetensors")
    before = load_file(adapter / "adapter_model.safetensors")
    summary = dpo_member(
        MemberSpec("ann", str(base), str(adapter)),
        PAIRS,
        tmp_path / "ann1",
        DPOSettings(learning_rate=1e-2, max_length=128),
        LoraSettings(),
        CPU_SYS,
        seed=0,
    )
    assert summary["pairs"] == 2 and summary["steps"] == 2
    after = load_file(tmp_path / "ann1" / "adapter" / "adapter_model.safetensors")
    assert after.keys() == before.keys()  # same adapter, saved without TRL's "ref" copy
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert digest(base / "model.safetensors") == base_digest


def test_dpo_without_pairs_keeps_member_unchanged(sft_adapter, tmp_path, caplog):
    base, adapter = sft_adapter
    empty = PAIRS.iloc[:0]
    with caplog.at_level("WARNING"):
        summary = dpo_member(
            MemberSpec("ann", str(base), str(adapter)),
            empty,
            tmp_path / "same",
            DPOSettings(),
            LoraSettings(),
            CPU,
            0,
        )
    assert summary["steps"] == 0 and "no preference pairs" in caplog.text
    copied = tmp_path / "same" / "adapter" / "adapter_model.safetensors"
    assert digest(copied) == digest(adapter / "adapter_model.safetensors")
    fresh = dpo_member(
        MemberSpec("cid", str(base)), empty, tmp_path / "fresh", DPOSettings(), LoraSettings(), CPU, 0
    )
    weights = load_file(tmp_path / "fresh" / "adapter" / "adapter_model.safetensors")
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert fresh["steps"] == 0 and lora_b and all(v.abs().sum() == 0 for v in lora_b)  # the base itself


def test_fresh_member_gets_a_lora_from_dpo(sft_adapter, tmp_path):
    base, _ = sft_adapter
    summary = dpo_member(
        MemberSpec("cid", str(base)),
        PAIRS,
        tmp_path / "cid",
        DPOSettings(learning_rate=1e-2, max_length=128),
        LoraSettings(r=4),
        CPU,
        seed=0,
    )
    weights = load_file(tmp_path / "cid" / "adapter" / "adapter_model.safetensors")
    assert any("lora_A" in k for k in weights)
    assert summary["steps"] == 2


def test_loader_shares_one_base_between_members(sft_adapter):
    from sparta.models import MemberLoader

    base, adapter = sft_adapter
    loader = MemberLoader("cpu", "float32")
    ids = torch.tensor([[1, 5, 9, 12]])

    def logits(spec):
        with torch.no_grad():
            return loader.load(spec)(input_ids=ids).logits

    ann = logits(MemberSpec("ann", str(base), str(adapter)))
    plain = logits(MemberSpec("plain", str(base)))
    again = logits(MemberSpec("ann", str(base), str(adapter)))
    assert len(loader._bases) == 1  # one base in memory for both members
    assert not torch.allclose(ann, plain)
    assert torch.equal(ann, again)


def test_dpo_is_reproducible_with_the_same_seed(sft_adapter, tmp_path):
    """Same seed, same pairs: byte-identical adapters, also for a fresh LoRA (random A init)."""
    base, adapter = sft_adapter
    specs = {"fresh": MemberSpec("cid", str(base)), "cont": MemberSpec("ann", str(base), str(adapter))}
    for name, spec in specs.items():
        outs = []
        for k in range(2):
            dpo_member(
                spec,
                PAIRS,
                tmp_path / f"{name}{k}",
                DPOSettings(learning_rate=1e-2, max_length=128),
                LoraSettings(),
                CPU,
                seed=3,
            )
            outs.append(load_file(tmp_path / f"{name}{k}" / "adapter" / "adapter_model.safetensors"))
        assert all(torch.equal(outs[0][key], outs[1][key]) for key in outs[0]), name


def test_members_trained_in_one_job_equal_members_trained_alone(sft_adapter, tmp_path):
    """fanout pool: one base load, members one after another; the same adapters as one job
    per member (same seeds), for a member with an adapter and for a fresh one."""
    from sparta.train import dpo_members

    base, adapter = sft_adapter
    specs = [
        MemberSpec("ann", str(base), str(adapter)),
        MemberSpec("cid", str(base)),
        MemberSpec("bob", str(base), str(adapter)),
    ]
    dpo = DPOSettings(learning_rate=1e-2, max_length=128)
    together = dpo_members(
        [(s, tmp_path / "pool" / s.name, 10 + k) for k, s in enumerate(specs)],
        PAIRS,
        dpo,
        LoraSettings(),
        CPU,
    )
    assert [t["steps"] for t in together] == [2, 2, 2] and all(t["log_history"] for t in together)
    for k, spec in enumerate(specs):
        dpo_member(spec, PAIRS, tmp_path / "alone" / spec.name, dpo, LoraSettings(), CPU, seed=10 + k)
        pooled = load_file(tmp_path / "pool" / spec.name / "adapter" / "adapter_model.safetensors")
        alone = load_file(tmp_path / "alone" / spec.name / "adapter" / "adapter_model.safetensors")
        assert pooled.keys() == alone.keys()
        for key in alone:
            torch.testing.assert_close(pooled[key], alone[key], rtol=1e-5, atol=1e-6)


def _sppo_setup(sft_adapter, tmp_path, loss_type, p_chosen, p_rejected):
    """A trainer on the member (SPPO's when loss_type is None, else TRL's DPOTrainer with that
    loss) and one batch of both pairs, reference log-probs precomputed as in dpo_members."""
    from trl import DPOConfig, DPOTrainer

    from sparta.train import TrainableMembers, load_tokenizer, preference_dataset, sppo_trainer

    base, adapter = sft_adapter
    model = TrainableMembers(LoraSettings(), CPU_SYS).attach(MemberSpec("ann", str(base), str(adapter)), 0)
    tok = load_tokenizer(str(base))
    tok.padding_side = "right"
    prefs = PAIRS.assign(
        chosen_score=[1 + 9 * p for p in p_chosen], rejected_score=[1 + 9 * p for p in p_rejected]
    )
    args = DPOConfig(
        output_dir=str(tmp_path / "trainer"),
        beta=0.1,
        loss_type=[loss_type or "sigmoid"],
        per_device_train_batch_size=2,
        max_length=128,
        precompute_ref_log_probs=True,
        use_cpu=True,
        bf16=False,  # the run's precision on CPU (fp32), not TRL's bf16 autocast
        report_to=[],
        seed=0,
    )
    extra, cls = {}, DPOTrainer
    if loss_type is None:
        cls, collator = sppo_trainer()
        extra["data_collator"] = collator(pad_token_id=tok.pad_token_id, max_length=128)
    data = preference_dataset(prefs, "sys", win_probs=loss_type is None)
    trainer = cls(model=model, args=args, train_dataset=data, processing_class=tok, **extra)
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer, model, batch


def test_sppo_loss_by_hand(sft_adapter, tmp_path):
    """SPPO's squared loss (Wu et al. 2024, eq. 4.7, as the official trainer computes it: the
    mean of its two terms) from log-probabilities computed here."""
    p_w, p_l = torch.tensor([0.8, 0.6]), torch.tensor([0.3, 0.1])
    trainer, model, batch = _sppo_setup(sft_adapter, tmp_path, None, p_w.tolist(), p_l.tolist())
    _nudge(model)  # move the policy away from its reference (a frozen copy)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        token_logps = torch.log_softmax(logits[:, :-1].float(), -1).gather(
            -1, batch["input_ids"][:, 1:, None]
        )[..., 0]
        logps = (token_logps * batch["completion_mask"][:, 1:]).sum(1)
        chosen, rejected = logps.chunk(2)
        lr_w = chosen - batch["ref_chosen_logps"]
        lr_l = rejected - batch["ref_rejected_logps"]
        by_hand = (((lr_w - (p_w - 0.5) / 0.1) ** 2 + (lr_l - (p_l - 0.5) / 0.1) ** 2) / 2).mean()
        loss = trainer.compute_loss(model, batch)
    assert lr_w.abs().max() > 1e-3  # the log-ratios are not trivially zero
    assert torch.allclose(loss, by_hand, atol=1e-4), (loss, by_hand)


def _nudge(model):
    """Move the policy's LoRA away from the frozen reference copy, the same way every time."""
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "lora_B" in name and ".default." in name:
                w.add_(0.05 * torch.randn(w.shape, generator=torch.Generator().manual_seed(1)))
    model.eval()


def test_sppo_with_hard_probabilities_is_trl_sppo_hard(sft_adapter, tmp_path):
    """With P_w = 1 and P_l = 0 our loss is half of TRL's sppo_hard on the same batch (TRL sums
    the two squared terms; the official SPPO trainer averages them)."""
    losses, batches = [], []
    for loss_type, folder in ((None, "ours"), ("sppo_hard", "trl")):
        trainer, model, batch = _sppo_setup(sft_adapter, tmp_path / folder, loss_type, [1.0, 1.0], [0.0, 0.0])
        _nudge(model)
        with torch.no_grad():
            losses.append(trainer.compute_loss(model, batch))
        batches.append(batch)
    assert torch.equal(batches[0]["input_ids"], batches[1]["input_ids"])
    assert losses[0] > 0 and torch.allclose(2 * losses[0], losses[1], atol=1e-5), losses


# answers that share an opening ("It is"), answers of different lengths, one answer the other's
# prefix, and two equal answers: every way a pair's tree can branch
TREE_PAIRS = pd.DataFrame(
    {
        "prompt": ["What is 3 + 4?", "What is 2 * 5? Show the steps.", "What is 1 + 1?", "Name a number."],
        "chosen": ["It is 7. The answer is 7.", "2 * 5 = 10. The answer is 10.", "2", "Seven"],
        "rejected": ["It is 9.", "It is 25.", "2 and more", "Seven"],
    }
)


def _fused_batch(sft_adapter, tmp_path):
    """The member with its LoRA moved off zero, and one TRL preference batch of TREE_PAIRS."""
    from trl import DPOConfig, DPOTrainer

    from sparta.train import TrainableMembers, load_tokenizer, preference_dataset

    base, adapter = sft_adapter
    model = TrainableMembers(LoraSettings(), CPU_SYS).attach(MemberSpec("ann", str(base), str(adapter)), 0)
    _nudge(model)
    tok = load_tokenizer(str(base))
    tok.padding_side = "right"
    args = DPOConfig(
        output_dir=str(tmp_path / "trainer"),
        per_device_train_batch_size=len(TREE_PAIRS),
        max_length=128,
        use_cpu=True,
        bf16=False,
        report_to=[],
    )
    trainer = DPOTrainer(
        model=model, args=args, train_dataset=preference_dataset(TREE_PAIRS, "sys"), processing_class=tok
    )
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    return model, {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "labels": labels,
    }


@pytest.mark.parametrize("chunk,own_head", [(1024, True), (7, True), (1024, False)])
def test_pair_tree_gives_what_trls_two_rows_give(sft_adapter, tmp_path, monkeypatch, chunk, own_head):
    """Each pair as one tree row (shared start once, the rejected answer seeing only the shared
    start and itself, LM head on scored positions): TRL's fused output and gradients, with the
    head in one piece, in checkpointed chunks, and as TRL's kernel (GPU runs)."""
    from sparta import pair_tree

    monkeypatch.setattr(pair_tree, "HEAD_CHUNK", chunk)
    monkeypatch.setattr(pair_tree, "OWN_HEAD", own_head)
    model, kw = _fused_batch(sft_adapter, tmp_path)
    tree = pair_tree.tree_of(kw["input_ids"], kw["attention_mask"], kw["labels"])
    assert tree.input_ids.numel() < kw["input_ids"].numel()  # fewer positions computed
    assert len(tree.labels) == int((kw["labels"][:, 1:] != -100).sum())  # the head scores only these
    outs, grads = [], []
    for way in ("rows", "tree"):
        model.zero_grad()
        model.train()
        out = (
            model(**kw, use_cache=False, fused_lm_head=True)
            if way == "rows"
            else pair_tree.forward(model, **kw)
        )
        out.log_probs.sum().backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    rows, tree_out = outs
    assert torch.equal(rows.label_mask, tree_out.label_mask)
    for field in ("log_probs", "entropy", "mean_logits"):
        torch.testing.assert_close(getattr(tree_out, field), getattr(rows, field), rtol=1e-5, atol=1e-5)
    assert torch.equal(tree_out.is_top1, rows.is_top1 & rows.label_mask)
    assert rows.log_probs.abs().sum() > 1  # scores that could differ
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-5)


def test_dpo_through_the_pair_tree_trains_what_trls_forward_trains(sft_adapter, tmp_path, monkeypatch):
    """A DPO job (and SPPO's trainer) with the tree forward and with TRL's own: the same
    adapters up to float rounding."""
    from sparta import pair_tree
    from sparta.train import dpo_members

    base, adapter = sft_adapter
    spec = MemberSpec("ann", str(base), str(adapter))
    prefs = TREE_PAIRS.assign(chosen_score=[9.0, 8.0, 7.0, 6.0], rejected_score=[2.0, 3.0, 4.0, 5.0])
    weights = {}
    for loss in ("dpo", "sppo"):
        for way in (False, True):
            monkeypatch.setattr(pair_tree, "PAIR_TREE", way)
            out = tmp_path / f"{loss}-{way}"
            dpo_members(
                [(spec, out, 5)],
                prefs,
                DPOSettings(learning_rate=1e-2, max_length=128),
                LoraSettings(),
                CPU_SYS,
                loss=loss,
            )
            weights[loss, way] = load_file(out / "adapter" / "adapter_model.safetensors")
        rows, tree = weights[loss, False], weights[loss, True]
        before = load_file(adapter / "adapter_model.safetensors")
        moved = sum(float((rows[k] - before[k]).norm() ** 2) for k in rows) ** 0.5
        apart = sum(float((tree[k] - rows[k]).norm() ** 2) for k in rows) ** 0.5
        # Adam turns float noise in near-zero gradients into whole steps of some weights, so the
        # adapters are compared as a whole: the two trainings moved them the same way
        assert moved > 0.1 and apart < 0.05 * moved, (loss, moved, apart)  # a leaking tree: 0.5


def _dpo_config_fields(monkeypatch, tmp_path, device, batch_size=2):
    """The fields of the DPOConfig a DPO job builds for ``device`` (recorded, not validated:
    transformers refuses bf16 on a machine without a GPU), and its TrainableMembers."""
    import trl

    from sparta.train import Tracking, TrainableMembers, _DPOJob

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # an H100
    monkeypatch.setattr(trl, "DPOConfig", lambda **fields: fields)
    runtime = Runtime(device=device, system_prompt=None)
    members = TrainableMembers(LoraSettings(), runtime)
    job = _DPOJob(members, DPOSettings(batch_size=batch_size), runtime, Tracking(), "dpo", 1000.0)
    return job.args("ann", 0, tmp_path), members


def test_dpo_on_cuda_asks_for_the_fast_options(monkeypatch, tmp_path):
    """device cuda, dtype auto, on a GPU with bf16: bf16 weights and autocast, pinned memory, a
    larger reference batch; padding_free stays off (TRL 1.16's DPO ignores it)."""
    fields, members = _dpo_config_fields(monkeypatch, tmp_path, "cuda", batch_size=2)
    assert members.device.type == "cuda" and members.dtype == torch.bfloat16
    assert fields["bf16"] and not fields["fp16"] and not fields["use_cpu"]
    assert fields["dataloader_pin_memory"]
    assert fields["precompute_ref_batch_size"] == 8 and fields["precompute_ref_log_probs"]
    assert fields["padding_free"] is False


def test_dpo_on_the_cpu_asks_for_no_gpu_option(monkeypatch, tmp_path):
    """The CPU's DPOConfig is what it was before the GPU options: fp32, no autocast, TRL's
    reference batch (the training batch)."""
    from sparta import train

    cpu, members = _dpo_config_fields(monkeypatch, tmp_path, "cpu")
    assert members.dtype == torch.float32
    assert cpu["use_cpu"] and not cpu["bf16"] and not cpu["fp16"] and not cpu["dataloader_pin_memory"]
    assert "precompute_ref_batch_size" not in cpu and cpu["padding_free"] is False
    monkeypatch.setattr(train, "GPU_SPEED", False)
    plain, _ = _dpo_config_fields(monkeypatch, tmp_path, "cuda")
    gpu = {k: v for k, v in cpu.items() if k not in ("use_cpu", "bf16", "dataloader_pin_memory")}
    assert plain.keys() == cpu.keys()  # the switch: the libraries' defaults on a GPU too
    assert {k: v for k, v in plain.items() if k in gpu} == gpu


def test_dpo_on_cuda_asks_for_sdpa_attention(sft_adapter, monkeypatch):
    """A base loaded for a CUDA DPO job gets SDPA attention (here one loaded with eager
    attention, on the CPU); on the CPU the model keeps its own."""
    from sparta import train
    from sparta.models import load_base

    base, adapter = sft_adapter

    def eager(folder, device, dtype):
        model = load_base(folder, torch.device("cpu"), torch.float32)
        model.set_attn_implementation("eager")
        return model

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(train, "load_base", eager)
    spec = MemberSpec("ann", str(base), str(adapter))
    for device, expected in (("cuda", "sdpa"), ("cpu", "eager")):
        members = train.TrainableMembers(LoraSettings(), Runtime(device=device, system_prompt=None))
        model = members.attach(spec, 0)
        assert model.get_base_model().config._attn_implementation == expected, device


def test_a_bf16_lm_head_goes_to_trls_kernel_without_an_fp32_copy(sft_adapter, monkeypatch):
    """GPU runs (bf16 weights): the pair tree scores with TRL's chunked kernel, never through
    the fp32 head that would copy the LM head's weights to fp32."""
    from peft import PeftModel

    from sparta import pair_tree
    from sparta.models import load_base

    base, adapter = sft_adapter

    def fp32_head(*args):
        raise AssertionError("the fp32 head ran on a bf16 model")

    monkeypatch.setattr(pair_tree, "_head_fields", fp32_head)
    model = PeftModel.from_pretrained(load_base(str(base), torch.device("cpu"), torch.bfloat16), str(adapter))
    # one pair: chosen and rejected share "1 5 9"; the answers' tokens are scored
    ids = torch.tensor([[1, 5, 9, 12, 7], [1, 5, 9, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    labels = ids.masked_fill(torch.tensor([[0, 0, 1, 1, 1], [0, 0, 1, 1, 0]]) == 0, -100)
    assert pair_tree.tree_of(ids, mask, labels) is not None  # the tree's head, not TRL's forward
    with torch.no_grad():
        out = pair_tree.forward(model, input_ids=ids, attention_mask=mask, labels=labels)
    head = model.get_base_model().get_output_embeddings().weight
    assert head.dtype == torch.bfloat16 and out.label_mask.sum() == 5
    assert torch.isfinite(out.log_probs).all() and (out.log_probs[out.label_mask] < 0).all()


def test_a_dpo_job_stopped_midway_continues_from_its_save_bit_for_bit(sft_adapter, tmp_path, monkeypatch):
    """A DPO job killed after its progress was saved (a time limit, a requeue), then run
    again: it continues from the save (same pairs, steps and seeds) and its adapter and loss
    equal an uninterrupted job's bit for bit. Other inputs never take over a save."""
    from transformers import TrainerCallback

    import sparta.train as train

    base, adapter = sft_adapter
    spec = MemberSpec("ann", str(base), str(adapter))
    pairs = pd.concat([PAIRS] * 3, ignore_index=True)  # 6 steps of one pair
    params = DPOSettings(learning_rate=1e-2, max_length=128, save_minutes=1e-9)  # a save every step

    def run(out, stop_at=None):
        class Stop(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step == stop_at:
                    raise KeyboardInterrupt  # the job is killed here, after step 3's save

        callbacks = train.progress_callback
        if stop_at:
            monkeypatch.setattr(train, "progress_callback", lambda *a: Stop())
        try:
            return dpo_member(spec, pairs, out, params, LoraSettings(), CPU, seed=3)
        finally:
            monkeypatch.setattr(train, "progress_callback", callbacks)

    whole = run(tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "stopped", stop_at=3)
    saves = sorted(p.name for p in (tmp_path / "stopped" / "trainer").glob("checkpoint-*"))
    assert saves == ["checkpoint-3"], saves  # the last save only
    # killed again while it saved step 4: a save without the trainer's state (written last)
    # beside the previous one, which is where the next run continues
    partial = tmp_path / "stopped" / "trainer" / "checkpoint-4"
    shutil.copytree(partial.with_name("checkpoint-3"), partial)
    (partial / "trainer_state.json").unlink()
    resumed = run(tmp_path / "stopped")
    a, b = (load_file(tmp_path / f / "adapter" / "adapter_model.safetensors") for f in ("whole", "stopped"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed["steps"] == whole["steps"] == 6 and resumed["train_loss"] == whole["train_loss"]
    assert not (tmp_path / "stopped" / "trainer").exists()  # removed once the job is done
    # a save made for other pairs is not continued: the job starts afresh
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "other", stop_at=3)
    fresh = dpo_member(
        spec, pairs.iloc[::-1].reset_index(drop=True), tmp_path / "other", params, LoraSettings(), CPU, seed=3
    )
    assert fresh["steps"] == 6 and fresh["log_history"][0]["step"] == 1
