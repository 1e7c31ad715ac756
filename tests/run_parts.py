"""Test helpers for runs: parts of a fixed size whatever the measured pace, and a captured stderr that is a terminal."""

from __future__ import annotations

import sys

import pytest

from queerbench.run import parts as run_predict


def fix_part_size(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Every saved part of a run holds ``n`` sentences (the last of a range fewer): no pace bound, first part ``n``."""
    monkeypatch.setattr(run_predict, "SAVE_EVERY", n)
    monkeypatch.setattr(run_predict, "FIRST_PART", n)
    monkeypatch.setattr(run_predict, "SAVE_SECONDS", 1e12)


def stderr_is_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The captured stderr answers ``isatty()`` with True, as a terminal does: the library draws its bars there only
    then (a log file or a pipe gets none), so a test that reads the bar from ``capsys`` must say it is one."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
