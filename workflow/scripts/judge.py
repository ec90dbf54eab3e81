"""rule judge: Sparta's cross-judging (each served judge scores both answers of every duel it
is not in), or a baseline's judging: self-judging (self-rewarding, meta-rewarding with its
meta-judge), the annotator's win probabilities (SPPO), none (SPIN). In a pool job all
requests run in the same batches."""

import itertools
import json
from dataclasses import replace

import pandas as pd

from sparta import tables
from sparta.jobs import as_list, by_base, served_members
from sparta.judging import (
    RUBRICS,
    JudgeItem,
    Judgment,
    defences,
    judge_answers,
    judge_duels,
    judge_ids,
    meta_judge,
    reference_judgment,
    reference_win_probability,
)
from sparta.logs import setup
from sparta.members import MemberSpec
from sparta.methods import mean_judgment, win_rates
from sparta.settings import derive_seed, job_settings

sm = snakemake  # noqa: F821
log = setup(sm.log[0], sm.threads)
job = job_settings(sm)
cfg, system, t, r, method = (
    job.judge,
    job.runtime.system_prompt,
    sm.wildcards.t,
    sm.wildcards.r,
    sm.params.method,
)
duels = tables.read(sm.input.duels, "duels")
responses = tables.read_many(sm.input.responses, "responses")
text = dict(zip(zip(responses["duel_id"], responses["model"], responses["sample"]), responses["response"]))
reference = cfg.kind == "reference"  # the reference judge: no model runs
specs, backend = served_members(sm, job, "judges", open_backend=not reference)
answer_of = dict(zip(duels["duel_id"], duels["answer"]))


def seed(*parts):
    return derive_seed(job.runtime.seed, t, r, *parts, "judge")


def run(asked, judge_fn):
    """Judge ``asked`` [(served member, ..., item)] in groups of one base; Judgments in order."""
    if reference:  # every request's duel id is its second field, its item the last
        return [reference_judgment(a[-1].response, answer_of.get(a[1]), cfg.answer) for a in asked]
    out = [None] * len(asked)
    for group in by_base([a[0] for a in asked]):
        for i, j in zip(group, judge_fn(backend.serve_each([asked[i][0] for i in group]), group)):
            out[i] = j
    return out


rows = []  # dicts of the judgments table


def add(judge, duel, target, sample, j, kind="score"):
    rows.append(
        {
            "duel_id": duel,
            "judge": judge,
            "target": target,
            "sample": sample,
            "kind": kind,
            "score": j.score,
            "raw": j.raw,
            "error": j.error,
            "truncated": j.truncated,
            "sanitized": j.sanitized,
            "prompt_tokens": j.tokens,
        }
    )


if method == "sparta":
    asked = []  # (judge, duel id, target, item): both answers of a duel in turn
    for spec in specs:
        for d in duels[(duels["model_a"] != spec.name) & (duels["model_b"] != spec.name)].itertuples(
            index=False
        ):
            for target in (d.model_a, d.model_b):
                if (d.duel_id, target, 0) not in text:
                    raise ValueError(f"no response of {target} in duel {d.duel_id}: rerun its combat job")
                asked.append((spec, d.duel_id, target, JudgeItem(d.prompt, text[(d.duel_id, target, 0)])))
    judged = run(
        asked,
        lambda served, group: judge_duels(
            served,
            [asked[i][3] for i in group],
            cfg,
            system,
            [seed(asked[i][0].name, *asked[i][1:3]) for i in group],
        ),
    )
    for (spec, duel, target, _), j in zip(asked, judged):
        add(spec.name, duel, target, 0, j)
elif method in ("self_rewarding", "meta_rewarding"):
    asked = []  # (member, duel id, sample, item): every answer of the member to its prompts
    for spec in specs:
        for d in duels[duels["model_a"] == spec.name].itertuples(index=False):
            samples = sorted(k for (dd, m, k) in text if dd == d.duel_id and m == spec.name)
            asked += [
                (spec, d.duel_id, k, JudgeItem(d.prompt, text[(d.duel_id, spec.name, k)])) for k in samples
            ]
    # generate mode: each answer judged judge_samples times (the paper's 3), scores averaged
    n = job.baselines.judge_samples if cfg.mode == "generate" and not reference else 1
    rubric = RUBRICS[job.baselines.judge_prompt]  # the paper's additive prompt, or Sparta's
    each = [a for a in asked for _ in range(n)]
    judged_each = run(
        each,
        lambda served, group: judge_answers(
            served,
            [each[i][3] for i in group],
            cfg,
            system,
            [seed(each[i][0].name, *each[i][1:3], *([i % n] if i % n else [])) for i in group],
            rubric,
        ),
    )
    judged = [mean_judgment(judged_each[i : i + n]) for i in range(0, len(each), n)]
    for (spec, duel, k, _), j in zip(asked, judged):
        add(spec.name, duel, spec.name, k, j)
    if method == "meta_rewarding":
        # the member judges its best answer again, twice, in words; then, as meta-judge, says
        # which of its two judgments is better: that pair teaches it to judge
        frame = pd.DataFrame(
            [(a[0].name, a[1], a[2], j.score) for a, j in zip(asked, judged)],
            columns=["member", "duel", "sample", "score"],
        ).dropna()
        best = frame.sort_values(["score", "sample"], ascending=[False, True]).drop_duplicates(
            ["member", "duel"]
        )
        by = {s.name: s for s in specs}
        prompt_of = dict(zip(duels["duel_id"], duels["prompt"]))
        n = job.baselines.meta_judgments
        sampled = replace(cfg, mode="generate")
        again = [
            (
                by[b.member],
                b.duel,
                int(b.sample),
                JudgeItem(prompt_of[b.duel], text[(b.duel, b.member, int(b.sample))]),
            )
            for b in best.itertuples(index=False)
            for _ in range(n)
        ]
        texts = run(
            again,
            lambda served, group: judge_answers(
                served,
                [again[i][3] for i in group],
                sampled,
                system,
                [seed(again[i][0].name, again[i][1], again[i][2], "meta", i % n) for i in group],
                rubric,
            ),
        )
        firsts = list(range(0, len(again), n))
        users = [
            judge_ids(
                backend.serve(again[i][0]).tok,
                again[i][3].prompt,
                [again[i][3].response],
                sampled,
                system,
                "",
                rubric,
            )[0]
            for i in firsts
        ]
        pairs = [(texts[i].raw, texts[i + 1].raw) for i in firsts]
        verdicts = [None] * len(firsts)
        for group in by_base([again[i][0] for i in firsts]):
            served = backend.serve_each([again[firsts[g]][0] for g in group for _ in (0, 1)])
            for g, p in zip(
                group, meta_judge(served, [users[g] for g in group], [pairs[g] for g in group], cfg, system)
            ):
                verdicts[g] = p
        for g, i in enumerate(firsts):
            spec, duel, k, _ = again[i]
            p = verdicts[g]
            raw = json.dumps({"user": users[g], "judgments": list(pairs[g]), "p_first": p})
            meta = Judgment(
                None if p is None else 1 + 9 * p,
                raw,
                None if p is not None else "no verdict",
                texts[i].truncated,
                False,
                texts[i].tokens + texts[i + 1].tokens,
            )
            add(spec.name, duel, spec.name, k, meta, "meta")
elif method == "sppo":
    a = job.baselines.annotator
    pairwise = replace(cfg, format="pairwise", mode="expected")
    asked = []  # (annotator, duel id, member, (i, j), items): every two answers of a prompt
    for spec in specs:
        annotator = MemberSpec("annotator", a.base if a else spec.base, a.adapter if a else None)
        for d in duels[duels["model_a"] == spec.name].itertuples(index=False):
            samples = sorted(k for (dd, m, k) in text if dd == d.duel_id and m == spec.name)
            for i, j in itertools.combinations(samples, 2):
                items = [JudgeItem(d.prompt, text[(d.duel_id, spec.name, x)]) for x in (i, j)]
                asked += [
                    (annotator, d.duel_id, spec.name, (i, j), items[0]),
                    (annotator, d.duel_id, spec.name, (i, j), items[1]),
                ]
    judged = run(
        asked, lambda served, group: judge_duels(served, [asked[i][4] for i in group], pairwise, system)
    )
    if reference:  # P(first beats second) from the two answers' reference scores, as 1 + 9 P
        for k in range(0, len(asked), 2):
            p = reference_win_probability(judged[k].score, judged[k + 1].score)
            judged[k] = replace(judged[k], score=1 + 9 * p, error=None)
    beats, tokens = {}, {}
    for k in range(0, len(asked), 2):
        _, duel, member, (i, j), _ = asked[k]
        score = judged[k].score
        beats.setdefault((member, duel), {})[(i, j)] = 0.5 if score is None else (score - 1) / 9
        tokens[(member, duel)] = tokens.get((member, duel), 0) + judged[k].tokens + judged[k + 1].tokens
    for (member, duel), p in beats.items():
        samples = sorted({x for pair in p for x in pair})
        for k, w in win_rates(p, samples).items():
            raw = json.dumps({"win_rate": w, "p_beats": {f"{i}>{j}": v for (i, j), v in p.items()}})
            j = Judgment(1 + 9 * w, raw, None, False, False, tokens[(member, duel)] // len(samples))
            add("annotator", duel, member, k, j)
# spin: no judging

table = pd.DataFrame(
    rows, columns=[c for c in tables.columns("judgments") if c not in ("format", "defences")]
)
table["format"] = "reference" if reference else "pairwise" if method == "sppo" else cfg.format
table["defences"] = defences(cfg)
for spec, path in zip(specs, as_list(sm.output.judgments)):
    mine = table[table["target" if method == "sppo" else "judge"] == spec.name] if len(table) else table
    tables.write(mine if len(mine) else tables.empty("judgments"), path, "judgments")
    unusable = int(mine["score"].isna().sum())
    log.info(
        "%s (%s): %d judgments (%s, %s; defences %s): %d unusable, %d truncated, %d sanitized",
        spec.name,
        method,
        len(mine),
        "reference" if reference else cfg.format,
        "" if reference else cfg.mode,
        defences(cfg),
        unusable,
        int(mine["truncated"].sum()),
        int(mine["sanitized"].sum()),
    )
    if unusable:
        log.warning(
            "%s: %d of %d judgments had no usable score; they are left out", spec.name, unusable, len(mine)
        )
