"""The Hugging Face backend serving several members of one base in the same batches (PEFT
mixed-adapter batches) gives what serving each member alone gives."""

import pytest
import torch

from sparta.backends import open_backend
from sparta.chat import chat_ids
from sparta.judging import JudgeItem, judge_duels
from sparta.members import MemberSpec
from sparta.settings import BackendSettings, JudgeSettings, Runtime, Sampling

from .tiny import build_tiny_model

PROMPTS = ["What is 3 + 4?", "Tom has 5 apples and gets 2 more.", "What is 2 * 5?", "Score this: 7"]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A tiny base, two members with different random LoRA adapters, one plain member."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("pool")
    base = build_tiny_model(root / "base")
    specs = []
    for k, name in enumerate(("ann", "bob")):
        torch.manual_seed(k)
        lora = LoraConfig(r=4, lora_alpha=32, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(root / name)
        specs.append(MemberSpec(name, str(base), str(root / name)))
    specs.append(MemberSpec("cid", str(base)))
    return specs


def backend(specs):
    return open_backend(BackendSettings("hf"), Runtime(device="cpu", dtype="float32"), specs)


def requests(specs):
    """Every member asked every prompt, interleaved so batches mix members."""
    return [(s, p) for p in PROMPTS for s in specs]


def test_mixed_batches_answer_as_each_member_alone(pool):
    mixed = backend(pool)
    asked = requests(pool)
    served = mixed.serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    greedy = Sampling.greedy_decoding(8)
    together = served.generate(texts, greedy, [0] * len(texts), batch_size=5)
    for spec in pool:
        alone = backend([spec]).serve(spec)
        mine = [t for (s, _), t in zip(asked, texts) if s == spec]
        got = [g for (s, _), g in zip(asked, together) if s == spec]
        assert [g.text for g in alone.generate(mine, greedy, [0] * len(mine), batch_size=2)] == [
            g.text for g in got
        ]
    by_member = {s.name: [g.text for (m, _), g in zip(asked, together) if m == s] for s in pool}
    assert by_member["ann"] != by_member["bob"] != by_member["cid"]  # the adapters really differ


def test_mixed_batches_score_as_each_member_alone(pool):
    items = [JudgeItem(p, answer) for p in PROMPTS for answer in ("It is 7.", "Maybe 9.")]  # duels: a, b
    mixed = backend(pool)
    judges = [s for s in pool for _ in items]
    cfg = JudgeSettings(batch_size=5)
    together = judge_duels(mixed.serve_each(judges), items * len(pool), cfg, "sys")
    for k, spec in enumerate(pool):
        alone = judge_duels(backend([spec]).serve(spec), items, JudgeSettings(batch_size=3), "sys")
        for a, b in zip(alone, together[k * len(items) : (k + 1) * len(items)]):
            assert a.score == pytest.approx(b.score, abs=1e-5)
    assert together[0].score != together[len(items)].score


def test_sampling_is_seeded_per_answer_whatever_the_batch(pool):
    mixed = backend(pool)
    asked = requests(pool)
    served = mixed.serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    hot = Sampling(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=8)
    seeds = list(range(100, 100 + len(texts)))
    first = served.generate(texts, hot, seeds, batch_size=5)
    assert first == served.generate(texts, hot, seeds, batch_size=3)  # other batches, same answers
    backwards = mixed.serve_each([s for s, _ in asked][::-1])  # every request in another batch
    assert first == backwards.generate(texts[::-1], hot, seeds[::-1], batch_size=4)[::-1]
    spec = pool[0]
    mine = [i for i, (s, _) in enumerate(asked) if s == spec]
    alone = backend([spec]).serve(spec).generate([texts[i] for i in mine], hot, [seeds[i] for i in mine], 2)
    assert alone == [first[i] for i in mine]
    other = served.generate(texts, hot, [s + 1 for s in seeds], batch_size=5)
    assert [g.text for g in other] != [g.text for g in first]


@pytest.mark.parametrize("top_k, top_p", [(50, 0.95), (0, 1.0), (0, 0.5)])
def test_the_batched_draw_is_each_rows_multinomial(top_k, top_p):
    """The sampler draws every row at once (on a GPU a few kernels a step, not about ten per
    row) and still exactly as ``torch.multinomial`` with the row's own generator would, so CPU
    answers are those of the per-row draw; where CUDA is present its draws equal the CPU's."""
    from sparta.backends.hf import SeededSampler

    sampling = Sampling(temperature=0.8, top_p=top_p, top_k=top_k, max_new_tokens=4)
    seeds = list(range(500, 517))
    sampler = SeededSampler(seeds, sampling)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    torch.manual_seed(3)
    for _ in range(40):
        scores = torch.randn(len(seeds), 300) * 4
        logits = scores / sampling.temperature
        top, index = torch.topk(logits, top_k or logits.shape[-1], dim=-1)
        probs = top.softmax(-1)
        if top_p < 1:
            probs = top.masked_fill(probs.cumsum(-1) - probs >= top_p, float("-inf")).softmax(-1)
        want = [
            index[i, torch.multinomial(probs[i], 1, generator=g)].item() for i, g in enumerate(generators)
        ]
        assert sampler(None, scores).argmax(-1).tolist() == want
    if torch.cuda.is_available():
        cpu, gpu = SeededSampler(seeds, sampling), SeededSampler(seeds, sampling)  # the device is the scores'
        scores = torch.randn(len(seeds), 300)
        assert cpu(None, scores).argmax(-1).tolist() == gpu(None, scores.cuda()).argmax(-1).tolist()


def test_scoring_shares_prefixes_and_scores_as_each_request_alone(pool):
    """Requests whose prompts begin alike are computed with their common prefix once (one
    tree-masked row, fewer tokens), and each continuation's log-probability is what a plain
    forward pass over its prompt and continuation alone gives, whatever the adapter and
    batch."""
    from sparta.backends.hf import SHARED_PREFIX_MIN, _row_length, _segments

    mixed = backend(pool)
    _, names = mixed._model(pool)
    stem = list(range(5, 5 + 3 * SHARED_PREFIX_MIN))  # a long common start, as a judge instruction
    prompts, conts, who = [], [], []
    for k in range(9):
        tail = [40 + k, 41 + (k % 3)] + [60 + k] * (k % 4)  # own ends, of several lengths
        for m in range(len(pool)):
            prompts.append(stem[: 2 * SHARED_PREFIX_MIN + k] + tail)
            conts.append([[7], [8, 9], [8, 10, 11]])  # one- and many-token continuations
            who.append(m)
    prompts += [[3, 4], [3, 4, 5]]  # short prompts share nothing
    conts += [[[7], [9, 9]], [[7]]]
    who += [0, 1]
    adapters = [names[m] for m in who]
    segments = _segments(prompts, adapters, 8)
    assert sorted(i for _, idx in segments for i in idx) == list(range(len(prompts)))
    assert all(len({adapters[i] for i in idx}) == 1 and len(idx) <= 8 for _, idx in segments)
    shared_rows = [seg for seg in segments if len(seg[1]) > 1]
    assert shared_rows and all(shared >= SHARED_PREFIX_MIN for shared, _ in shared_rows)
    computed = sum(_row_length(seg, prompts, conts) for seg in segments)
    alone = sum(len(p) + sum(len(c) - 1 for c in cs) for p, cs in zip(prompts, conts))
    assert computed < alone * 0.6
    got = mixed.continuation_logprobs([pool[m] for m in who], prompts, conts, batch_size=8)
    want = [[] for _ in prompts]
    for m, spec in enumerate(pool):
        ref = backend([spec]).loader.load(spec)
        for i in (i for i, w in enumerate(who) if w == m):
            for c in conts[i]:
                ids = torch.tensor([prompts[i] + c])
                with torch.no_grad():
                    logp = torch.log_softmax(ref(input_ids=ids).logits[0].float(), -1)
                want[i].append(sum(logp[len(prompts[i]) + k - 1, c[k]].item() for k in range(len(c))))
    for lp, w in zip(got, want):
        assert lp == pytest.approx(w, abs=1e-4)
    assert got == mixed.continuation_logprobs([pool[m] for m in who], prompts, conts, batch_size=8)


def test_an_empty_continuation_scores_zero_and_leaves_the_others_alone(pool):
    """An empty answer (a member that ended its turn at once) is an empty continuation: its
    summed log-probability is 0, as vLLM's, and the batch it shares a row with scores as
    without it. Found on a GPU, where the widest row of a held-out pair-accuracy batch held
    an empty answer: the row's width was counted one short and the job crashed."""
    from sparta.backends.hf import SHARED_PREFIX_MIN

    mixed = backend(pool)
    stem = list(range(5, 5 + 2 * SHARED_PREFIX_MIN))
    prompts = [stem + [40], stem + [41], stem + [42, 43], [3, 4]]
    conts = [[[7, 8]], [[]], [[], [9]], [[]]]
    served = mixed.serve_each([pool[0]] * len(prompts))
    got = served.continuation_logprobs(prompts, conts, batch_size=8)
    assert got[1] == [0.0] and got[2][0] == 0.0 and got[3] == [0.0]
    alone = mixed.serve(pool[0]).continuation_logprobs([prompts[0], prompts[2]], [conts[0], [[9]]], 1)
    assert got[0][0] == pytest.approx(alone[0][0], abs=1e-5)
    assert got[2][1] == pytest.approx(alone[1][0], abs=1e-5)


def test_evaluation_tests_only_the_member_a_selection_can_pick(pool, tmp_path):
    """evaluation.test: selected scores every member on validation and only the best of them
    on test; the rows it keeps are those of test: all, and the run's selection is the same."""
    import json

    import pandas as pd

    from sparta.analysis import score_table, select_best
    from sparta.evaluate import evaluate_checkpoint
    from sparta.settings import TaskSpec
    from sparta.tasks import load_task

    rows = pd.DataFrame(
        {
            "question": [f"Which number is {i} + {i}?" for i in range(8)],
            "options": [json.dumps([str(2 * i), str(i), str(i + 3)]) for i in range(8)],
            "labels": [json.dumps([1, 0, 0])] * 8,
        }
    )
    rows.to_parquet(tmp_path / "tqa.parquet")
    spec = TaskSpec(
        name="tqa",
        file=str(tmp_path / "tqa.parquet"),
        prompt_column="question",
        options_column="options",
        labels_column="labels",
        metric="truthfulqa_mc",
    )
    task = load_task(spec, {}, seed=0)
    served = backend(pool)
    by_name = {s.name: s for s in pool}

    def serve(names):
        return served.serve_each([by_name[n] for n in names])

    groups = [[s.name for s in pool]]
    every = evaluate_checkpoint(serve, groups, task, "sys", 4, test="all")
    picked = evaluate_checkpoint(serve, groups, task, "sys", 4, test="selected")
    val = every[every["split"] == "validation"].groupby("member")["score"].mean()
    assert val.nunique() == len(pool)  # the members really differ: the choice means something
    best = val.idxmax()
    assert set(picked.loc[picked["split"] == "test", "member"]) == {best}
    assert set(picked.loc[picked["split"] == "validation", "member"]) == set(val.index)
    key = ["member", "split", "example_id"]
    merged = picked.merge(every, on=key, suffixes=("", "_all"))
    assert len(merged) == len(picked) == len(every) - 2 * len(task.rows["test"])
    assert (merged["score"] - merged["score_all"]).abs().max() < 1e-6
    for frame in (every, picked):
        frame["checkpoint"] = 0
    chosen = select_best(score_table(picked))
    assert chosen[["stage", "member"]].equals(select_best(score_table(every))[["stage", "member"]])
    assert chosen["test"].notna().all()
    with pytest.raises(ValueError, match="all or selected"):
        evaluate_checkpoint(serve, groups, task, "sys", 4, test="best")


def test_generation_computes_shared_prompt_starts_once_and_answers_as_alone(pool, monkeypatch):
    """A batch's common prompt start is computed once per adapter and a prompt asked several
    times of one member once (a judge's samples), and every answer, greedy or sampled, is the
    one generating it alone gives."""
    from sparta.backends import hf

    asked = requests(pool) + [(pool[0], PROMPTS[1])] * 3 + [(pool[2], PROMPTS[0])] * 2
    served = backend(pool).serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    seeds = list(range(7, 7 + len(texts)))
    embed = served.backend.loader.load_all(pool).get_input_embeddings()
    computed = []
    hook = embed.register_forward_pre_hook(lambda m, args: computed.append(args[0].numel()))
    try:
        for sampling in (
            Sampling.greedy_decoding(6),
            Sampling(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=6),
        ):
            computed.clear()
            together = served.generate(texts, sampling, seeds, batch_size=len(texts))
            prefill_shared = computed[0] + computed[1]  # shared starts, then the distinct prompts' rests
            monkeypatch.setattr(hf, "SHARE_PROMPTS", False)  # alone: plain left padding
            computed.clear()
            alone = [
                backend([s]).serve(s).generate([t], sampling, [seed], 1)[0]
                for (s, _), t, seed in zip(asked, texts, seeds)
            ]
            monkeypatch.undo()
            assert together == alone
            tokens = sum(len(t) - 1 for t in texts)
            assert prefill_shared < 0.6 * tokens, (prefill_shared, tokens)  # 279 of 557 here
    finally:
        hook.remove()
    dupes = [g.text for (s, p), g in zip(asked, together) if (s, p) == (pool[0], PROMPTS[1])]
    assert len(set(dupes)) > 1  # the samples of one prompt still draw from their own seeds


def test_the_roomy_cache_layer_holds_what_transformers_layer_holds():
    """RoomyLayer writes into room kept after its tokens instead of concatenating; whatever
    happens to the cache (growth past its room, rows selected, tokens cropped), it returns
    and holds what DynamicLayer does."""
    from transformers.cache_utils import DynamicLayer

    from sparta.backends.hf import RoomyLayer

    g = torch.Generator().manual_seed(0)
    plain, roomy = DynamicLayer(), RoomyLayer(room=2)
    rows = 5

    def step(add):
        k, v = (torch.randn(rows, 2, add, 4, generator=g) for _ in range(2))
        for got, want in zip(roomy.update(k, v), plain.update(k, v)):
            assert torch.equal(got, want)

    for add in (6, 1, 1, 1, 4):  # the fourth token outgrows the room of 2, the 4 tokens again
        step(add)
    keep = torch.tensor([4, 0, 2])
    plain.batch_select_indices(keep)
    roomy.batch_select_indices(keep)
    rows = 3
    step(1)
    step(1)
    plain.crop(-2)
    roomy.crop(-2)
    step(3)
    assert torch.equal(roomy.keys, plain.keys) and torch.equal(roomy.values, plain.values)
    assert roomy.get_seq_length() == plain.get_seq_length() == 16


@pytest.mark.parametrize("sampled", [False, True])
def test_finished_rows_leave_the_batch_and_every_answer_stays_what_generate_gives(pool, monkeypatch, sampled):
    """Own decoding (rows that ended their turn leave the batch, the roomy KV cache) gives
    exactly the answers of transformers' generate with its DynamicCache, greedy or sampled,
    members mixed; rows really leave (fewer rows in later steps) and answers end both ways."""
    from sparta.backends import hf

    # a ninth of the vocabulary ends a turn: the random members' answers end at many lengths
    monkeypatch.setattr(hf, "stop_token_ids", lambda tok: list(range(3, 400, 9)))
    monkeypatch.setattr(hf, "COMPACT_AT", 0.1)
    asked = requests(pool) * 2
    served = backend(pool).serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    sampling = (
        Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=12)
        if sampled
        else Sampling.greedy_decoding(12)
    )
    seeds = list(range(3, 3 + len(texts)))
    embed = served.backend.loader.load_all(pool).get_input_embeddings()
    widths = []
    hook = embed.register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape)))
    try:
        ours = served.generate(texts, sampling, seeds, batch_size=len(texts))
    finally:
        hook.remove()
    monkeypatch.setattr(hf, "OWN_DECODING", False)
    monkeypatch.setattr(hf, "ROOMY_CACHE", False)
    theirs = served.generate(texts, sampling, seeds, batch_size=len(texts))
    assert ours == theirs
    assert {g.finish_reason for g in ours} == {"stop", "length"}
    steps = [rows for rows, width in widths if width == 1]
    assert steps[0] == len(texts) and min(steps) < len(texts) / 2, steps


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """A tiny base, four members with different random LoRA adapters (the default target
    modules), one plain member."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("four")
    base = build_tiny_model(root / "base", hidden=16)
    specs = []
    for k in range(4):
        torch.manual_seed(10 + k)
        lora = LoraConfig(
            r=4,
            lora_alpha=16,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            init_lora_weights=False,
        )
        get_peft_model(AutoModelForCausalLM.from_pretrained(base), lora).save_pretrained(root / f"m{k}")
        specs.append(MemberSpec(f"m{k}", str(base), str(root / f"m{k}")))
    specs.append(MemberSpec("plain", str(base)))
    return specs


@pytest.mark.parametrize("sampled", [False, True])
def test_rows_indexed_once_per_batch_answer_and_score_as_peft_own_mixed_batches(four, monkeypatch, sampled):
    """Each adapter's rows as an index tensor built once per batch (``ROW_INDEX``) and the
    sampler's draws made ahead give exactly the tokens of PEFT's own mixed batches with a draw
    per step (greedy and seeded sampling; four adapters and the base in one batch, rows
    leaving it), and exactly their scores."""
    from sparta.backends import hf

    # a ninth of the vocabulary ends a turn: answers end at many lengths, rows leave the batch
    monkeypatch.setattr(hf, "stop_token_ids", lambda tok: list(range(3, 400, 9)))
    monkeypatch.setattr(hf, "COMPACT_AT", 0.1)
    asked = requests(four) * 2
    served = backend(four).serve_each([s for s, _ in asked])
    texts = [chat_ids(served.tok, p, "sys") for _, p in asked]
    hot = Sampling(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=12)
    sampling = hot if sampled else Sampling.greedy_decoding(12)
    seeds = list(range(20, 20 + len(texts)))
    conts = [[[7], [8, 9], [10]] for _ in texts]

    def answers_and_scores():
        answers = served.generate(texts, sampling, seeds, batch_size=len(texts))
        return answers, served.continuation_logprobs(texts, conts, 8)

    ours = answers_and_scores()
    monkeypatch.setattr(hf, "ROW_INDEX", False)
    monkeypatch.setattr(hf, "DRAW_AHEAD", 1)  # one draw per row and step
    peft_own = answers_and_scores()
    assert ours == peft_own
    assert {g.finish_reason for g in ours[0]} == {"stop", "length"}
    by_member = {s.name: [g.text for (m, _), g in zip(asked, ours[0]) if m == s] for s in four}
    assert len({tuple(t) for t in by_member.values()}) == len(four)  # the adapters really differ


def test_no_lora_layer_builds_a_tensor_from_python_data_at_a_step(four, monkeypatch):
    """Guard of the row forward: PEFT routes a mixed batch's LoRA layers through
    ``lora.Linear._mixed_batch_forward``, which sparta replaces; with it, a forward builds as
    many tensors from Python data with four adapters as with one (none in a LoRA layer);
    PEFT's own builds three per LoRA layer and adapter. Fails when PEFT stops calling the
    method (the index lists come back, unnoticed by the answers)."""
    from torch.profiler import ProfilerActivity, profile

    from sparta.backends import hf
    from sparta.libpatches import install

    install()  # what the backend's generate and scoring call first
    model, names = backend(four)._model(four)
    ids = torch.ones((8, 3), dtype=torch.long)

    def lifted(adapters: int) -> int:
        hooks = hf._adapter_hooks([names[i % adapters] for i in range(8)], torch.device("cpu"))
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            model(input_ids=ids, **hooks)
        return sum(e.name == "aten::lift_fresh" for e in prof.events())

    assert lifted(4) == lifted(1)
    monkeypatch.setattr(hf, "ROW_INDEX", False)
    assert lifted(4) - lifted(1) == 3 * 3 * 4 * 2  # 3 more adapters, 4 LoRA layers in each of 2 layers


def test_draws_made_ahead_are_each_steps_own():
    """The sampler draws several steps' random numbers at once per row; across refills and
    rows leaving, every step gets what one draw per row and step from its generator gives."""
    from sparta.backends import hf

    sampling = Sampling(temperature=0.8, top_p=1.0, top_k=5, max_new_tokens=50)
    seeds = list(range(40, 46))
    sampler = hf.SeededSampler(seeds, sampling)
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    rows = list(range(len(seeds)))
    old = hf.DRAW_AHEAD
    try:
        hf.DRAW_AHEAD = 3 * len(seeds) * 5  # three steps at a time
        for step in range(8):
            want = torch.stack([torch.empty(5).exponential_(1, generator=generators[r]) for r in rows])
            assert torch.equal(sampler.exponentials(5, torch.device("cpu")), want), step
            if step in (1, 4):  # rows leave mid-block
                keep = [0, 2, 3] if step == 1 else [1, 2]
                sampler.select(keep)
                rows = [rows[k] for k in keep]
    finally:
        hf.DRAW_AHEAD = old
