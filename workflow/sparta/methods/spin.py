"""SPIN (Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong
Language Models", ICML 2024; official code github.com/uclaml/SPIN).

Each member answers each prompt once; nobody judges. Chosen = the prompt's reference answer
(``prompts.reference_column``, SPIN's SFT data), rejected = the member's own answer (an answer
equal to the reference makes no pair). DPO's logistic loss against the previous iterate, on
the pairs of the last ``baselines.spin_history`` iterations: 2 (default) as SPIN's recipe,
which trains each iteration on its new data mixed with the previous iteration's; 1: the
current iteration's only. With history 2 a member trains from iteration 2 on twice the pairs
of iteration 1 for the same ``dpo.epochs``: twice its DPO steps (and time), which a
comparison with the other methods at equal iterations should keep in mind.

Deliberate differences: every member aligns alone; the prompts of an iteration are the run's
prompt draw, not SPIN's Ultrachat subset; the answers use the run's generation settings.
"""

from __future__ import annotations

import pandas as pd

from .base import Method, pair


class SPIN(Method):
    name = "spin"
    judgment_kinds = ()  # nobody judges

    def samples(self, samples: int | None) -> int:
        return 1  # one answer: the rejected one

    def pair_rows(self, duels, responses, judgments, baselines) -> list[dict]:
        """Chosen = the prompt's reference answer, rejected = the member's own answer."""
        text = dict(zip(responses["duel_id"], responses["response"]))
        pairs = []
        for d in duels.itertuples(index=False):
            own = text.get(d.duel_id)
            if pd.isna(d.reference) or own is None or own.strip() == str(d.reference).strip():
                continue
            pairs.append(pair(d, d.member_a, str(d.reference), own, float("nan"), float("nan")))
        return pairs

    def trained_iterations(self, t: int, baselines) -> list[int]:
        """The last ``spin_history`` iterations up to ``t`` (iteration 2 of history 2: 1 and 2)."""
        return list(range(max(1, t - baselines.spin_history + 1), t + 1))
