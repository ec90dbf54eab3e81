"""What every method shares: the :class:`Method` interface the rule scripts call, the judge
job's context (:class:`JudgeRun`), and the pair helpers of the self-alignment baselines.

A method says in one place how many answers a member gives each prompt, who fights whom,
who judges with which settings, how pairs are built, which iterations' pairs train and with
which loss. The rule scripts (matchmake, combat, judge, aggregate, dpo, analyze) ask the
method object; none of them branches on the method's name.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from types import SimpleNamespace

import pandas as pd

from .. import tables
from ..jobs import by_base
from ..judging import JudgeItem, Judgment, defences, reference_judgment
from ..matchmaking import duel_id


@dataclass(frozen=True)
class Round:
    """One round's duels, answers and judgments, and where it sits in the run."""

    iteration: int
    round: int
    duels: pd.DataFrame
    responses: pd.DataFrame
    judgments: pd.DataFrame


class Method:
    """Sparta's interface; a baseline overrides what it does differently."""

    name = ""
    baseline = True
    """Each member aligns alone on its own pairs (``trainee``); no reputations."""
    unread: tuple[str, ...] = ()
    """Settings sections none of the method's jobs reads: a change never rebuilds its run."""
    default_samples = 1
    judgment_owner = "judge"
    """Column of the judgments table naming the member whose judge job wrote the row."""
    judges_label_accuracy = False
    """Whether members judge other members' answers (the judges' label accuracy applies)."""
    judgment_kinds: tuple[str, ...] = ("score",)
    """Kinds of the judgments table's rows the method writes (the analysis counts each)."""
    tie_setting: str | None = None
    """The setting below which a gap of two judged scores makes no pair (a tie), if any."""

    # --- answers ---------------------------------------------------------------------------

    def samples(self, samples: int | None) -> int:
        """Answers a member gives each prompt (``baselines.samples``; None: the default)."""
        return self.default_samples if samples is None else samples

    def rounds(self, settings) -> int:
        """Rounds of an iteration: one for a baseline."""
        return 1

    def duels(self, plan, members, reputations, matchmaking, seed, *, t: int, r: int) -> pd.DataFrame:
        """A baseline's duels of a round: every member against itself on every planned prompt."""
        return self_duels(plan, members, t, r)

    # --- judging ---------------------------------------------------------------------------

    def judge(self, run: JudgeRun) -> None:
        """Add this job's judgments to ``run`` (none by default)."""

    def judgment_format(self, cfg) -> str:
        return cfg.format

    def judging_warnings(self, judge, baselines) -> list[str]:
        """What these judge settings make impossible for the method (said at the config check
        and in the judge job's log); none by default."""
        return []

    # --- pairs and training ----------------------------------------------------------------

    def pairs(self, duels, responses, judgments, baselines) -> pd.DataFrame:
        """The iteration's preference pairs of one round (a baseline: each member's own)."""
        return self.kept_pairs(duels, responses, judgments, baselines)[0]

    def kept_pairs(self, duels, responses, judgments, baselines) -> tuple[pd.DataFrame, int]:
        """:meth:`pairs`, and how many were dropped for having the same text chosen and
        rejected (DPO would learn nothing from them)."""
        made = self.pair_rows(duels, responses, judgments, baselines)
        rows = [r for r in made if r["chosen"] != r["rejected"]]
        return tables.frame(rows, "preferences"), len(made) - len(rows)

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        raise NotImplementedError

    def aggregate(self, state, round_: Round, reputation, baselines):
        """(history, preferences, counts) of a round; a baseline leaves the reputations."""
        state.iteration, state.round = round_.iteration, round_.round
        prefs, identical = self.kept_pairs(round_.duels, round_.responses, round_.judgments, baselines)
        counts = {
            "prompts": len(round_.duels),
            "pairs": len(prefs),
            "identical": identical,
            **prefs.groupby("trainee").size().to_dict(),
        }
        return tables.empty("history"), prefs, counts

    def trained_iterations(self, t: int, baselines) -> list[int]:
        """Iterations whose pairs the members train on at the end of iteration ``t``."""
        return [t]

    def loss(self, baselines) -> str:
        """The trainer's loss: dpo (TRL's DPO with dpo.loss_type), sppo or sppo_hard."""
        return "dpo"


BLOCK = 512  # judgments a judge job keeps as one finished part of its progress


class JudgeRun:
    """A judge job's inputs, its model calls and the judgments it has made: what a method's
    :meth:`Method.judge` works with. ``specs``: the members this job serves; ``backend``: the
    backend serving them (None for the reference judge); ``seed(*parts)``: the seed of one
    sampled judgment; ``progress``: a :class:`sparta.progress.Progress` that keeps each finished
    block of :data:`BLOCK` judgments, so that a retry after a time limit or a requeue goes on
    from the next block (the blocks are the same whether or not a run was interrupted)."""

    def __init__(self, specs, duels, responses, cfg, system, baselines, *, backend, seed, progress=None):
        self.specs, self.duels, self.cfg, self.system = specs, duels, cfg, system
        self.baselines, self.backend, self.seed = baselines, backend, seed
        self.progress, self.calls = progress, 0
        self.reference = cfg.kind == "reference"  # no model runs: answers checked
        self.text = dict(
            zip(zip(responses["duel_id"], responses["member"], responses["sample"]), responses["response"])
        )
        self.answer_of = dict(zip(duels["duel_id"], duels["answer"]))
        self.rows: list[dict] = []

    def samples_of(self, duel: str, member: str) -> list[int]:
        return sorted(k for (d, m, k) in self.text if d == duel and m == member)

    def run(self, asked: list[tuple], judge_fn) -> list:
        """Judge ``asked`` [(served member, duel id, ..., item)] in groups of one base: one
        Judgment each, in order; ``judge_fn(served, positions)``. The reference judge checks
        each item's answer against its duel's prompt answer instead."""
        if self.reference:
            return [
                reference_judgment(a[-1].response, self.answer_of.get(a[1]), self.cfg.answer) for a in asked
            ]
        self.calls += 1
        out = []
        for start in range(0, len(asked), BLOCK):
            block = list(range(start, min(start + BLOCK, len(asked))))
            out += self._kept(
                f"call{self.calls:03d}-{start:08d}", lambda b=block: self._block(asked, judge_fn, b)
            )
        return out

    def _block(self, asked: list[tuple], judge_fn, block: list[int]) -> list:
        done = {}
        for group in by_base([asked[i][0] for i in block]):
            positions = [block[g] for g in group]
            done.update(
                zip(positions, judge_fn(self.backend.serve_each([asked[i][0] for i in positions]), positions))
            )
        return [done[i] for i in block]

    def _kept(self, part: str, judge) -> list:
        """``judge()``'s judgments, kept in the job's progress as one part; read back when an
        earlier attempt of the job finished it."""
        if self.progress is None:
            return judge()
        frame = self.progress.get(part)
        if frame is not None:
            return [Judgment(**json.loads(x)) for x in frame["judgment"]]
        judged = judge()
        if all(isinstance(j, Judgment) for j in judged):
            self.progress.put(part, pd.DataFrame({"judgment": [json.dumps(asdict(j)) for j in judged]}))
        return judged

    def judged(self, asked: list[tuple], judge_fn, cfg, seed_of, *extra) -> list:
        """:meth:`run` with a judging function of :mod:`sparta.judging`:
        ``judge_fn(served, items, cfg, system, seeds, *extra)``, the items being the last entry
        of each asked tuple and ``seed_of(position in asked)`` their seeds. A call of an odd
        number of items (pointwise) is made even with an empty item, a judged set of its own whose
        judgment is thrown away: :func:`~sparta.judging.judge_answers` would pad it with a copy
        of the last item, whose seed would change that item's label table (with secret labels)
        and so make it depend on what else the call holds (e.g. on the job's fan-out)."""

        def call(served, group):
            items, seeds = [asked[i][-1] for i in group], [seed_of(i) for i in group]
            if len(items) % 2:
                if isinstance(getattr(served, "members", None), list):
                    served = type(served)(served.backend, served.members + served.members[-1:])
                items, seeds = items + [JudgeItem("", "")], seeds + seeds[-1:]
            return judge_fn(served, items, cfg, self.system, seeds, *extra)[: len(group)]

        return self.run(asked, call)

    def add(self, judge: str, duel: str, target: str, sample: int, j, kind: str = "score") -> None:
        self.rows.append(
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
                "requests": j.requests,
                "generated_tokens": j.generated,
            }
        )

    def table(self, method: Method) -> pd.DataFrame:
        """The judgments table of the job (every member's rows)."""
        columns = [c for c in tables.columns("judgments") if c not in ("format", "defences")]
        out = pd.DataFrame(self.rows, columns=columns)
        out["format"] = "reference" if self.reference else method.judgment_format(self.cfg)
        out["defences"] = defences(self.cfg)
        return out


# --- helpers of the baselines ------------------------------------------------------------------


def self_duels(plan: pd.DataFrame, members: list[str], iteration: int, round_: int) -> pd.DataFrame:
    """A baseline's duels of a round: every member against itself on every planned prompt."""
    rows = plan[plan["round"] == round_]
    out = []
    for m in members:
        for r in rows.itertuples(index=False):
            out.append(
                {
                    "iteration": iteration,
                    "round": round_,
                    "duel_id": f"{duel_id(iteration, int(r.position))}-{m}",
                    "prompt_id": str(r.prompt_id),
                    "prompt": str(r.prompt),
                    "answer": getattr(r, "answer", None),
                    "reference": getattr(r, "reference", None),
                    "member_a": m,
                    "member_b": m,
                    "opponent_branch": "self",
                    "opponent_candidates": [m],
                }
            )
    return tables.frame(out, "duels")


def pair(duel, member, chosen, rejected, s_c, s_r, *, kind="actor", prompt=None) -> dict:
    """One row of the preferences table: ``member``'s pair, trained on by the member."""
    return {
        "iteration": int(duel.iteration),
        "round": int(duel.round),
        "duel_id": duel.duel_id,
        "prompt_id": duel.prompt_id,
        "prompt": duel.prompt if prompt is None else prompt,
        "chosen": chosen,
        "rejected": rejected,
        "chosen_member": member,
        "rejected_member": member,
        "chosen_score": s_c,
        "rejected_score": s_r,
        "margin": s_c - s_r,
        "trainee": member,
        "kind": kind,
    }


def duel_row(duels: pd.DataFrame, duel_id: str) -> SimpleNamespace:
    return SimpleNamespace(**duels.set_index("duel_id").loc[duel_id].to_dict(), duel_id=duel_id)


def scored(duels, responses, judgments) -> dict:
    """Per duel: [(sample, text, score)] of the member's answers (score from kind "score")."""
    score = judgments[judgments["kind"] == "score"].set_index(["duel_id", "sample"])["score"]
    out: dict[str, list] = {}
    for r in responses.itertuples(index=False):
        s = score.get((r.duel_id, int(r.sample)))
        out.setdefault(r.duel_id, []).append(
            (int(r.sample), r.response, None if s is None or pd.isna(s) else float(s))
        )
    return out


def best_and_worst(
    answers: list[tuple[int, str, float]], length_control: float | None = None, min_margin: float = 0.0
):
    """(chosen, rejected) of scored answers: the highest and the lowest score, or None when
    they tie, differ by less than ``min_margin``, or fewer than two answers have a score. With
    length control rho: the shortest answer within rho x range of the best, the longest within
    rho x range of the worst (their margin is checked again)."""
    have = [a for a in answers if a[2] is not None]
    if len(have) < 2:
        return None
    hi, lo = max(a[2] for a in have), min(a[2] for a in have)
    if hi == lo or hi - lo < min_margin:
        return None
    if length_control is None:
        chosen = max(have, key=lambda a: (a[2], -a[0]))
        rejected = min(have, key=lambda a: (a[2], a[0]))
    else:
        band = length_control * (hi - lo)
        chosen = min((a for a in have if a[2] >= hi - band), key=lambda a: (len(a[1]), -a[2], a[0]))
        rejected = max((a for a in have if a[2] <= lo + band), key=lambda a: (len(a[1]), -a[2], -a[0]))
        if chosen[2] <= rejected[2] or chosen[2] - rejected[2] < min_margin:
            return None
    return chosen, rejected


def best_and_worst_pairs(
    duels, responses, judgments, length_control: float | None = None, min_margin: float = 0.0
) -> list[dict]:
    """Actor pairs: each member's best and worst scored answer to each prompt, at least
    ``min_margin`` apart."""
    answers = scored(duels, responses, judgments)
    pairs = []
    for d in duels.itertuples(index=False):
        picked = best_and_worst(answers.get(d.duel_id, []), length_control, min_margin)
        if picked:
            (_, yc, sc), (_, yr, sr) = picked
            pairs.append(pair(d, d.member_a, yc, yr, sc, sr))
    return pairs


def mean_judgment(samples: list):
    """One score from several sampled judgments of an answer: the mean of the usable scores,
    None when none is; the raw texts kept as a JSON list, tokens read and generated and
    requests summed, truncated/sanitized when any was."""
    if len(samples) == 1:
        return samples[0]
    usable = [j.score for j in samples if j.score is not None]
    return Judgment(
        sum(usable) / len(usable) if usable else None,
        json.dumps({"samples": [j.raw for j in samples], "scores": [j.score for j in samples]}),
        None if usable else "; ".join(str(j.error) for j in samples),
        any(j.truncated for j in samples),
        any(j.sanitized for j in samples),
        sum(j.tokens for j in samples),
        sum(j.requests for j in samples),
        sum(j.generated for j in samples),
    )
