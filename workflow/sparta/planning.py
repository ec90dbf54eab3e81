"""A faster lookup of the rules that can produce a file, for Snakemake's DAG building.

Snakemake finds a file's producers with an index keyed by each output's constant *prefix*
(the text before its first wildcard), then tests every rule it finds against the file. Every
output of this workflow starts ``results/{exp}/``, so that index finds every output of every
rule for every file (about 270 with the paper study's pools: each pool rule lists every
member's file), and planning Table 1 spent a third of its time there
(``benchmarks/bench_dag.py``). This index is keyed by the constant *suffix* instead (the text
after the last wildcard: ``/members/flan/member.json``, ``/duels.parquet``), which tells the
outputs apart, and tests only the outputs it found, not every output of their rules.

The answer is the same set of rules as Snakemake's own: a rule is a producer when one of its
outputs, logs or benchmarks matches the file; a file an output matches starts with that
output's constant prefix and ends with its constant suffix, so keying by either finds the same
outputs (``tests/test_planning.py`` compares both on every file of a plan:
``SPARTA_CHECK_OUTPUT_INDEX=1`` asks both indexes every lookup and stops at the first
difference). Installed by rules/common.smk; a Snakemake without the index this replaces keeps
its own.
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys

CHECK_VARIABLE = "SPARTA_CHECK_OUTPUT_INDEX"


class SuffixOutputIndex:
    """Snakemake's OutputIndex interface (``match``, ``match_producers``), keyed by the
    outputs' constant suffixes."""

    def __init__(self, rules) -> None:
        from snakemake.common.prefix_lookup import PrefixLookup

        entries = []
        for rule in rules:
            for product in rule.products():
                prefix, suffix = str(product.constant_prefix()), str(product.constant_suffix())
                entries.append((suffix[::-1], (rule, prefix, product)))
        self._lookup = PrefixLookup(entries=entries)

    def _candidates(self, targetfile: str):
        for _, (rule, prefix, product) in self._lookup.match_iter(targetfile[::-1]):
            if targetfile.startswith(prefix):
                yield rule, product

    def match(self, targetfile: str) -> set:
        """The rules with an output whose constant prefix and suffix the file has."""
        return {rule for rule, _ in self._candidates(targetfile)}

    def match_producers(self, targetfile: str) -> set:
        """The rules with an output, log or benchmark that matches the file."""
        found = set()
        for rule, product in self._candidates(targetfile):
            if rule in found:
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
        ours, theirs = super().match_producers(targetfile), self._snakemake.match_producers(targetfile)
        if ours != theirs:
            raise RuntimeError(
                f"output index: {targetfile}: ours {sorted(r.name for r in ours)}, "
                f"Snakemake's {sorted(r.name for r in theirs)}"
            )
        CheckedOutputIndex.lookups += 1
        return ours


def _functions(rule):
    """The functions of a rule Snakemake calls per job: input, params, log and resources."""
    for items in (rule.input, rule.params, rule.log):
        for _, item in items._allitems():
            inner = getattr(getattr(item, "_file", item), "callable", None) or item
            if inspect.isfunction(inner):
                yield inner
    for value in dict(rule.resources).values():
        if inspect.isfunction(value):
            yield value


def precompute_signatures(rules) -> int:
    """Each function's parameters read once, not once per job: Snakemake asks a function's
    signature every time it calls it (to pass only the arguments it takes: wildcards, input,
    threads ...), which was a tenth of planning Table 1, unless the function carries them
    (snakemake.common.overwrite_function_params, which this uses). The parameters are the
    function's own, so every call gets what it got before. Returns how many were set."""
    try:
        from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR as attr
    except ImportError:
        return 0
    done = 0
    for rule in rules:
        for func in _functions(rule):
            if not hasattr(func, attr):
                setattr(func, attr, inspect.signature(func).parameters)
                done += 1
    return done


def _report() -> None:
    print(f"sparta: output index checked on {CheckedOutputIndex.lookups} lookups", file=sys.stderr)


def install() -> bool:
    """Use :class:`SuffixOutputIndex` for the DAGs Snakemake builds from now on; False (and
    Snakemake's own index kept) where this Snakemake has no such index."""
    try:
        import snakemake.dag as dag
        from snakemake.output_index import OutputIndex
    except ImportError:
        return False
    if getattr(dag, "OutputIndex", None) not in (OutputIndex, SuffixOutputIndex, CheckedOutputIndex):
        return False
    checked = os.environ.get(CHECK_VARIABLE) == "1"
    if checked and dag.OutputIndex is not CheckedOutputIndex:
        atexit.register(_report)
    dag.OutputIndex = CheckedOutputIndex if checked else SuffixOutputIndex
    return True
