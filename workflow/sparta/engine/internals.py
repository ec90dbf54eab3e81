"""The check each part of the engine makes that Snakemake has the internals it replaces."""


def require(module: str, why: str, needed=(), lacks: str | None = None) -> None:
    """Stop the run where Snakemake lacks an internal that ``sparta.engine.<module>`` replaces:
    an attribute of ``needed`` ((class, name) pairs), or what ``lacks`` says."""
    absent = [f"{c.__name__}.{n}" for c, n in needed if not hasattr(c, n)]
    lacks = f"this snakemake has no {', '.join(absent)}" if absent else lacks
    if lacks:
        from snakemake.exceptions import WorkflowError

        raise WorkflowError(
            f"sparta: {lacks}, {why} (sparta/engine/{module}.py, tested with the snakemake that "
            "requirements.txt pins; SPARTA_ENGINE=plain runs plain Snakemake without it: "
            "docs/development/engine.md)"
        )
