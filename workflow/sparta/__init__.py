"""Sparta Alignment as cached, resumable stages.

The pure core (tables, matchmaking, reputation) imports only numpy, pandas, pyarrow and
scipy-free math; model code lives in models/generate/judge/train.
"""

__version__ = "0.1.0"
