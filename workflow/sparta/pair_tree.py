"""DPO's forward pass with each pair's shared start computed once.

TRL's preference batch holds a pair as two rows (prompt + chosen, prompt + rejected) and its
fused LM head scores every position of both. Here a pair is one row laid out as a tree: the
shared start, the chosen answer, then the rejected answer, which attends to the shared start
and itself only, at the positions it has in its own row; the LM head runs only on scored
positions. The result is TRL's fused output in TRL's row layout, so every TRL loss and metric
reads it unchanged, the same up to float rounding (tests/test_train.py). On the embedded
study's Sparta pairs a pair's two rows hold 159.7 positions on average, its tree 103.7
(``benchmarks/bench_dpo.py``). Elsewhere (:func:`applies`, :func:`tree_of`): TRL's forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .libpatches import install

# the tree forward (False: TRL's two-row forward everywhere; the tests and bench_dpo.py compare;
# SPARTA_LIBRARY_PATCHES=plain sets it False)
PAIR_TREE = True
# scored positions per LM-head chunk; more than one chunk recomputes each chunk's logits in the
# backward pass instead of keeping them (what TRL's kernel does for every chunk)
HEAD_CHUNK = 1024
# fp32 heads outside autocast computed here (False: TRL's kernel for every head; tests compare)
OWN_HEAD = True
# vocabulary columns per tile of TRL's kernel (what TRL's fused forward passes it)
TRL_VOCAB_CHUNK = 32768
# config fields that change the logits after the LM head: such models take TRL's forward
_SCALED = "final_logit_softcapping logit_scale output_multiplier lm_head_multiplier logits_scaling".split()


@dataclass
class Tree:
    """Where a batch of 2B rows (B chosen, then B rejected) goes in B tree rows."""

    input_ids: torch.Tensor  # (B, T) tokens of the trees, padded
    position_ids: torch.Tensor  # (B, T) each token's position in its own row
    attend: torch.Tensor  # (B, T, T) bool: query may see key
    tree_row: torch.Tensor  # (N,) for each scored token: the tree row ...
    tree_col: torch.Tensor  # ... and column of the hidden state that predicts it
    out_row: torch.Tensor  # (N,) where its score goes in TRL's layout: row ...
    out_col: torch.Tensor  # ... and column (the token's position - 1)
    labels: torch.Tensor  # (N,) the scored tokens


def tree_of(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor, pad_id: int = 0
) -> Tree | None:
    """The tree layout of a preference batch, or None where it does not apply (an odd number
    of rows, or a row whose tokens are not a prefix of it: left padding)."""
    rows, width = input_ids.shape
    if rows % 2:
        return None
    valid = attention_mask.bool()
    lengths = valid.sum(1)
    if not bool((valid.long().cumprod(1).sum(1) == lengths).all()):
        return None
    pairs = rows // 2
    ids, lens, lab = input_ids.cpu(), lengths.tolist(), labels.cpu()
    trees, positions, maps = [], [], []
    for i in range(pairs):
        a, b = ids[i, : lens[i]], ids[pairs + i, : lens[pairs + i]]
        n = min(len(a), len(b))
        differ = (a[:n] != b[:n]).nonzero()
        shared = int(differ[0, 0]) if len(differ) else n
        trees.append(torch.cat([a, b[shared:]]))
        positions.append(torch.cat([torch.arange(len(a)), torch.arange(shared, len(b))]))
        # token k of the chosen row is tree column k; of the rejected row k below the shared
        # start, else after the chosen answer
        k = torch.arange(len(b))
        maps.append((torch.arange(len(a)), torch.where(k < shared, k, len(a) + k - shared), len(a), shared))
    depth = max(len(t) for t in trees)
    tree_ids = torch.full((pairs, depth), pad_id, dtype=input_ids.dtype)
    tree_pos = torch.zeros((pairs, depth), dtype=torch.long)
    attend = torch.zeros((pairs, depth, depth), dtype=torch.bool)
    attend[:, :, 0] = True  # padding queries see the first token (no empty softmax); nothing sees them
    causal = torch.ones((depth, depth), dtype=torch.bool).tril()
    t_row, t_col, o_row, o_col, o_lab = [], [], [], [], []
    for i, (tree, pos, (col_a, col_b, len_a, shared)) in enumerate(zip(trees, positions, maps)):
        tree_ids[i, : len(tree)], tree_pos[i, : len(tree)] = tree, pos
        attend[i, :len_a, :len_a] = causal[:len_a, :len_a]
        branch = len(tree) - len_a
        if branch:
            attend[i, len_a : len(tree), :shared] = True
            attend[i, len_a : len(tree), len_a : len(tree)] = causal[:branch, :branch]
        for row, cols in ((i, col_a), (pairs + i, col_b)):
            scored = (lab[row, 1 : len(cols)] != -100).nonzero()[:, 0] + 1  # token positions t >= 1
            t_row.append(torch.full((len(scored),), i, dtype=torch.long))
            t_col.append(cols[scored - 1])
            o_row.append(torch.full((len(scored),), row, dtype=torch.long))
            o_col.append(scored - 1)
            o_lab.append(ids[row, scored])
    device = input_ids.device
    return Tree(
        input_ids=tree_ids.to(device),
        position_ids=tree_pos.to(device),
        attend=attend.to(device),
        tree_row=torch.cat(t_row).to(device),
        tree_col=torch.cat(t_col).to(device),
        out_row=torch.cat(o_row).to(device),
        out_col=torch.cat(o_col).to(device),
        labels=torch.cat(o_lab).to(device),
    )


def _head_fields(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor):
    """Log-probability of each label under the LM head (fp32, as TRL's kernel accumulates), with
    entropy, mean logit and top-1 hit (no gradient: metrics). Outside autocast: under a
    trainer's bf16 autocast the head would round the logits to bf16."""
    with torch.autocast(hidden.device.type, enabled=False):
        logits = torch.nn.functional.linear(
            hidden.float(), weight.float(), None if bias is None else bias.float()
        )
    lse = torch.logsumexp(logits, dim=-1)
    target = logits.gather(-1, labels[:, None])[:, 0]
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(-1)
        mean = logits.mean(-1)
        top1 = target >= logits.max(-1).values
    return target - lse, entropy, mean, top1


def _head(hidden, weight, bias, labels):
    """(log-probability, entropy, mean logit, top-1 hit) of each label under the LM head: fp32
    weights outside autocast (CPU) by :func:`_head_fields` in checkpointed chunks of
    :data:`HEAD_CHUNK` positions; else (or ``OWN_HEAD`` off) by TRL's own chunked kernel."""
    if OWN_HEAD and weight.dtype == torch.float32 and not torch.is_autocast_enabled(hidden.device.type):
        if len(hidden) <= HEAD_CHUNK:
            return _head_fields(hidden, weight, bias, labels)
        from torch.utils.checkpoint import checkpoint

        cuts = [slice(s, s + HEAD_CHUNK) for s in range(0, len(hidden), HEAD_CHUNK)]
        parts = [
            checkpoint(_head_fields, hidden[c], weight, bias, labels[c], use_reentrant=False) for c in cuts
        ]
        return tuple(torch.cat(p) for p in zip(*parts))
    from trl.kernels import ChunkedLogProbFunction

    outputs = ("log_probs", "entropy", "mean_logits", "is_top1")
    logp, entropy, _, mean, top1 = ChunkedLogProbFunction.apply(
        hidden, weight, bias, labels, 1.0, TRL_VOCAB_CHUNK, None, 1.0, outputs
    )
    return logp, entropy, mean, top1


def applies(model, trainer) -> bool:
    """Whether the tree forward can stand in for TRL's on this trainer's ``model``."""
    from peft import PeftModel

    if not PAIR_TREE or not isinstance(model, PeftModel) or getattr(trainer, "use_weighting", False):
        return False
    if model.active_peft_config.is_prompt_learning:  # virtual tokens shift TRL's positions
        return False
    config = model.get_base_model().config.get_text_config()
    return all(getattr(config, name, None) in (None, 1, 1.0) for name in _SCALED)


def forward(model, input_ids, attention_mask, labels, **kwargs):
    """TRL's fused output (``model(..., labels=labels, fused_lm_head=True)``) computed on the
    tree layout (zero where not scored); the model's own call where the batch has none."""
    from trl.trainer.utils import FusedCausalLMOutput

    causal = model.get_base_model()
    tree = tree_of(input_ids, attention_mask, labels, pad_id=0)
    if tree is None:
        return model(
            input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **kwargs
        )
    kwargs = {k: v for k, v in kwargs.items() if k not in ("use_cache", "output_router_logits")}
    if kwargs:
        raise TypeError(f"pair tree forward: unexpected model arguments {sorted(kwargs)}")
    hidden = causal.base_model(
        input_ids=tree.input_ids,
        attention_mask=tree.attend[:, None],
        position_ids=tree.position_ids,
        use_cache=False,
    ).last_hidden_state
    head = causal.get_output_embeddings()
    picked = hidden[tree.tree_row, tree.tree_col].to(head.weight.device)
    logp, entropy, mean, top1 = _head(picked, head.weight, head.bias, tree.labels.to(head.weight.device))
    shape = (input_ids.size(0), input_ids.size(1) - 1)
    where = (tree.out_row, tree.out_col)
    mask = torch.zeros(shape, dtype=torch.bool, device=logp.device)
    mask[where] = True
    # index_put keeps the log-probabilities connected to the model, also when nothing is scored
    log_probs = logp.new_zeros(shape).index_put(where, logp)
    fields = [x.new_zeros(shape).index_put(where, x) for x in (entropy, mean)]
    is_top1 = torch.zeros(shape, dtype=torch.bool, device=logp.device).index_put(where, top1)
    return FusedCausalLMOutput(
        loss=-log_probs.sum() / mask.sum().clamp(min=1),
        log_probs=log_probs,
        entropy=fields[0],
        mean_logits=fields[1],
        is_top1=is_top1,
        label_mask=mask,
    )


class PairCall:
    """A stand-in for the trainer's model in TRL's loss code: a fused call
    (``fused_lm_head=True``) goes through :func:`forward`, anything else to the model."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *args, fused_lm_head: bool = False, **kwargs):
        if not fused_lm_head or args:
            return self.model(*args, fused_lm_head=fused_lm_head, **kwargs)
        return forward(self.model, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def with_pair_tree(trainer_class):
    """``trainer_class`` (TRL's DPOTrainer or a subclass) computing its policy and reference
    log-probabilities with :func:`forward` where it applies (libpatches: pair_tree)."""
    install()

    class PairTreeTrainer(trainer_class):
        def pair_model(self, model):
            """``model`` as TRL's loss code should call it: the tree forward where it applies."""
            if applies(model, self) and self.accelerator.unwrap_model(model) is model:
                return PairCall(model)
            return model

        def compute_ref_log_probs(self, model, inputs):
            return super().compute_ref_log_probs(self.pair_model(model), inputs)

        def _compute_loss(self, model, inputs, return_outputs):
            return super()._compute_loss(self.pair_model(model), inputs, return_outputs)

    PairTreeTrainer.__name__ = PairTreeTrainer.__qualname__ = f"PairTree{trainer_class.__name__}"
    return PairTreeTrainer
