"""Helpers the test modules share; fixtures stay in ``tests/conftest.py``.

- ``cli``: the ``memopt`` command line in a subprocess, as a user runs it, and its one-line errors
- ``processes``: whether a process memopt started is gone
- ``graphs``: hand-made training graphs (ONNX-built as ORTModule lays them out, or node by node)
- ``logsamples``: ORT's summaries as text, and the sample logs they come from
- ``fake_tuning``: the tuner over a FAKE trial runner on a real captured graph (no ORT)
- ``real_tuning``: tuning sessions over real CPU trials of a small recipe (ORT)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RECIPES"]

RECIPES = Path(__file__).resolve().parent.parent / "recipes"  # the recipes the tests train
