"""The seed of each random draw of a run, derived from the run's seed and what the draw is for
(iteration, round, member, purpose), so that one draw never shifts another and a rerun on any
machine draws the same. Pure: the standard library only."""

from __future__ import annotations

import zlib


def derive_seed(*parts) -> int:
    """A 31-bit seed from any parts (seed, iteration, round, member...), stable across runs
    and machines."""
    return zlib.crc32("|".join(map(str, parts)).encode()) & 0x7FFFFFFF
