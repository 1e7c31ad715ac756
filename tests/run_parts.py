"""A test helper: make a run save its predictions in parts of a fixed size, whatever the measured pace."""

from __future__ import annotations

import pytest

from queerbench import run_predict


def fix_part_size(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Every saved part of a run holds ``n`` sentences (the last of a range fewer): no pace bound, first part ``n``."""
    monkeypatch.setattr(run_predict, "SAVE_EVERY", n)
    monkeypatch.setattr(run_predict, "FIRST_PART", n)
    monkeypatch.setattr(run_predict, "SAVE_SECONDS", 1e12)
