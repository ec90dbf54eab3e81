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
difference). Installed by :func:`sparta.engine.install`; a Snakemake without the index this
replaces keeps its own, and sparta.engine says so. Each file's producers are looked up once
per DAG (a file has a lookup per job that reads it), and the signatures of the rules' input
and params functions once per function.
"""

from __future__ import annotations

import atexit
import inspect
import os
import sys
from pathlib import Path

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

    def _candidates(self, targetfile: str):
        for _, (rule, prefix, product) in self._lookup.match_iter(targetfile[::-1]):
            if targetfile.startswith(prefix):
                yield rule, product

    def match_producers(self, targetfile: str) -> set:
        """The rules with an output, log or benchmark that matches the file (remembered: the
        rules do not change while a DAG is built)."""
        found = self._found.get(targetfile)
        if found is None:
            found = self._found[targetfile] = frozenset(self._match(targetfile))
        return set(found)

    def _match(self, targetfile: str) -> set:
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


_SIGNATURES: dict = {}


def _cached_function_params(func):
    """snakemake.common.get_function_params, remembered per function: Snakemake inspects the
    signature of an input or params function twice on every call (which of input, output,
    threads, ... it takes), about 5% of planning Table 1. A rule's functions are made once,
    when the Snakefile is read, and their signatures never change."""
    params = getattr(func, "_overwrite_params", None)  # snakemake.common.overwrite_function_params
    if params is not None:
        return params
    try:
        return _SIGNATURES[func]
    except KeyError:
        params = _SIGNATURES[func] = inspect.signature(func).parameters
        return params
    except TypeError:  # not hashable
        return inspect.signature(func).parameters


def _cache_signatures() -> bool:
    """Install :func:`_cached_function_params` where Snakemake looks its function up; False
    where this Snakemake has no such function."""
    try:
        import snakemake.common as common
        import snakemake.rules as rules
    except ImportError:
        return False
    modules = [m for m in (common, rules) if hasattr(m, "get_function_params")]
    if len(modules) < 2:
        return False
    for module in modules:
        module.get_function_params = _cached_function_params
    return True


def _path_parts(path: str, cwd: str) -> tuple[str, ...]:
    """``Path(path).absolute()``'s components, which pathlib orders paths by on POSIX."""
    if path.startswith("//"):  # pathlib keeps a leading "//" as its root
        return Path(path).absolute().parts
    if not path.startswith("/"):
        path = f"{cwd}/{path}"
    return ("/", *(part for part in path.split("/") if part and part != "."))


def check_directory_outputs(dag) -> None:
    """Snakemake's DAG.check_directory_outputs (no output of a job inside a directory output
    of another), the same answer from components instead of ``Path`` objects: Snakemake sorts
    every output of the plan as an absolute ``Path`` and compares neighbours with
    ``os.path.commonpath``, 6.7 s of planning Table 1's 9,971 jobs (2026-12-03). Sorted the
    same way (pathlib orders by components), a neighbour lies inside an output when that
    output's components begin it (``tests/test_planning.py`` compares both on nested, equal,
    relative and absolute paths)."""
    from snakemake.exceptions import ChildIOException

    cwd = os.getcwd()
    outputs = sorted({(_path_parts(str(f), cwd), job) for job in dag.jobs for f in job.output})
    for (a, job_a), (b, job_b) in zip(outputs, outputs[1:]):
        if a != b and b[: len(a)] == a and job_a != job_b:
            raise ChildIOException(parent=(Path(*a), job_a), child=(Path(*b), job_b))


REPLACED: dict = {}
"""Snakemake's own functions this module replaced, by name (the tests compare with them)."""

# the docstring of the Snakemake method check_directory_outputs replaces (a Snakemake whose
# method says otherwise keeps its own)
_CHECK_DOC = "Check that no output file is contained in a directory output of the same or another rule."


def _check_directories_faster() -> bool:
    try:
        import snakemake.api  # noqa: F401  (snakemake.dag alone is a circular import)
        import snakemake.dag as dag
    except ImportError:
        return False
    own = getattr(dag.DAG, "check_directory_outputs", None)
    if own is check_directory_outputs:
        return True
    if own is None or (own.__doc__ or "").strip() != _CHECK_DOC:
        return False
    REPLACED["check_directory_outputs"] = own
    dag.DAG.check_directory_outputs = check_directory_outputs
    return True


def install() -> list[str]:
    """Use :class:`SuffixOutputIndex` for the DAGs Snakemake builds from now on, remember the
    signatures of the rules' functions (:func:`_cached_function_params`), check directory
    outputs without ``Path`` objects (:func:`check_directory_outputs`) and set the garbage
    collector's thresholds (:data:`GC_THRESHOLDS`) for this snakemake process (a job's script
    runs in a process of its own). Each gives the same plan as Snakemake's own code, faster.
    Return the parts this Snakemake keeps its own code for, where it lacks what a part
    replaces (sparta.engine says which, once)."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
    kept = []
    if not _cache_signatures():
        kept.append("snakemake.common.get_function_params (signature cache)")
    if not _check_directories_faster():
        kept.append("DAG.check_directory_outputs (directory-output check)")
    try:
        import snakemake.dag as dag
        from snakemake.output_index import OutputIndex
    except ImportError:
        return [*kept, "snakemake.dag.OutputIndex (producer index)"]
    if getattr(dag, "OutputIndex", None) not in (OutputIndex, SuffixOutputIndex, CheckedOutputIndex):
        return [*kept, "snakemake.dag.OutputIndex (producer index)"]
    checked = os.environ.get(CHECK_VARIABLE) == "1"
    if checked and dag.OutputIndex is not CheckedOutputIndex:
        atexit.register(_report)
    dag.OutputIndex = CheckedOutputIndex if checked else SuffixOutputIndex
    return kept
