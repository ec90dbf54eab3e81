"""A faster lookup of the rules that can produce a file, for Snakemake's DAG building.

Snakemake indexes the outputs by their constant *prefix* (the text before the first wildcard).
Every output here starts ``results/{exp}/``, so that index finds every output of every rule for
every file (about 270 with the paper study's pools), and planning Table 1 spent a third of its
time there (``benchmarks/bench_dag.py``). This index is keyed by the constant *suffix* (the text
after the last wildcard: ``/members/flan/member.json``, ``/duels.parquet``), which tells the
outputs apart, and tests only the outputs it found. A file an output matches starts with its
prefix and ends with its suffix, so both find the same rules: ``tests/test_planning.py``
compares them on every file of a plan (``SPARTA_CHECK_OUTPUT_INDEX=1`` asks both on every
lookup and stops at the first difference).
"""

from __future__ import annotations

import atexit
import os
import sys

CHECK_VARIABLE = "SPARTA_CHECK_OUTPUT_INDEX"


class SuffixOutputIndex:
    """Snakemake's OutputIndex as its DAG uses it (``match_producers``), keyed by the outputs'
    constant suffixes."""

    def __init__(self, rules) -> None:
        from snakemake.common.prefix_lookup import PrefixLookup

        entries = []
        for rule in rules:
            for product in rule.products():
                prefix, suffix = str(product.constant_prefix()), str(product.constant_suffix())
                entries.append((suffix[::-1], (rule, prefix, product)))
        self._lookup = PrefixLookup(entries=entries)
        self._found: dict[str, frozenset] = {}  # a DAG asks for the same file once per reader

    def match_producers(self, targetfile: str) -> set:
        """The rules with an output, log or benchmark that matches the file (remembered: the
        rules do not change while a DAG is built)."""
        found = self._found.get(targetfile)
        if found is None:
            found = self._found[targetfile] = frozenset(self._match(targetfile))
        return set(found)

    def _match(self, targetfile: str) -> set:
        found = set()
        for _, (rule, prefix, product) in self._lookup.match_iter(targetfile[::-1]):
            if rule in found or not targetfile.startswith(prefix):
                continue
            try:
                if product.match(targetfile):
                    found.add(rule)
            except Exception:  # a bad wildcard regex: Snakemake's own check says which rule
                if rule.is_producer(targetfile):
                    found.add(rule)
        return found


class CheckedOutputIndex(SuffixOutputIndex):
    """Both indexes on every lookup; a difference stops the plan with the file named."""

    lookups = 0

    def __init__(self, rules) -> None:
        from snakemake.output_index import OutputIndex

        super().__init__(rules)
        self._snakemake = OutputIndex(rules)

    def match_producers(self, targetfile: str) -> set:
        ours, theirs = self._match(targetfile), self._snakemake.match_producers(targetfile)
        if ours != theirs:
            raise RuntimeError(
                f"output index: {targetfile}: ours {sorted(r.name for r in ours)}, "
                f"Snakemake's {sorted(r.name for r in theirs)}"
            )
        CheckedOutputIndex.lookups += 1
        return ours


def _report() -> None:
    print(f"sparta: output index checked on {CheckedOutputIndex.lookups} lookups", file=sys.stderr)


# Python's cyclic garbage collector, at its default thresholds (700, 10, 10), scans the young
# objects every 700 allocations while a plan builds its hundreds of thousands of jobs, files
# and wildcards, which all live until the plan ends. Planning Table 1 (one plan each, this
# machine, 2026-12-03): 180 s at the default thresholds, 164 s with the collector off (1.58
# GB peak), 161 s at these (1.30 GB, as at the default).
GC_THRESHOLDS = (100_000, 50, 1000)


def install() -> list[str]:
    """Use :class:`SuffixOutputIndex` and :data:`GC_THRESHOLDS` in this snakemake process (a
    job's script runs in a process of its own). Return the parts this Snakemake keeps its own
    code for, where it lacks what a part replaces."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    try:
        import snakemake.dag as dag
        from snakemake.output_index import OutputIndex
    except ImportError:
        return ["snakemake.dag.OutputIndex (producer index)"]
    if getattr(dag, "OutputIndex", None) not in (OutputIndex, SuffixOutputIndex, CheckedOutputIndex):
        return ["snakemake.dag.OutputIndex (producer index)"]
    checked = os.environ.get(CHECK_VARIABLE) == "1"
    if checked and dag.OutputIndex is not CheckedOutputIndex:
        atexit.register(_report)
    dag.OutputIndex = CheckedOutputIndex if checked else SuffixOutputIndex
    return []
