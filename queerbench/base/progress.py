"""Progress bars for long steps: a tqdm bar that advances per finished item and whose clock never stands still.

:func:`progress_bar` is the one place the library's long steps (endpoint calls, local generation, SCM collection and
constrained scoring) get their bar from, so that they all behave the same way:

- the caller advances it by one per finished reply or scored prompt (a local runner that finishes a batch at once
  advances it by the batch's rows), never per chunk of work;
- the rate (``reply/s``) and the ETA come from a slow moving average of the finished items (tqdm's ``smoothing``
  :data:`SMOOTHING`: replies of a concurrent endpoint arrive in bursts, and a fast average would swing the ETA with
  each one), so before the first item has finished the ETA is ``?`` rather than a guess, and after the first batch it
  is the measured pace;
- a background thread redraws the bar every :data:`REFRESH_S` seconds, so the elapsed time keeps counting while a
  long batch (a 1,024-token story on a CPU) is in flight: a run that is working never looks hung.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["REFRESH_S", "SMOOTHING", "progress_bar"]

REFRESH_S = 5.0
"""How often (seconds) an open bar is redrawn while nothing finishes."""
SMOOTHING = 0.05
"""tqdm's exponential moving-average factor for the rate (0: the average since the start; tqdm's default 0.3)."""


@contextmanager
def progress_bar(
    total: int, desc: str, unit: str, *, disable: bool = False, refresh_s: float = REFRESH_S, **options: Any
) -> Iterator[Any]:
    """A ``tqdm.auto`` bar of ``total`` items, closed on exit; ``options`` go to tqdm (``file``, ``mininterval``).

    ``refresh_s`` (0: never) is the redraw period of the clock thread, which stops when the block ends. Without a
    ``file`` the bar goes to stderr only when stderr is a terminal: a log file or a pipe gets the run's own lines,
    not a redrawn bar every few seconds.
    """
    from tqdm.auto import tqdm

    if "file" not in options and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
        disable = True

    options = {"smoothing": SMOOTHING, "dynamic_ncols": True, **options}
    bar = tqdm(total=total, desc=desc, unit=unit, disable=disable, **options)
    stop = threading.Event()
    clock = None
    if not bar.disable and refresh_s > 0:

        def redraw() -> None:
            while not stop.wait(refresh_s):
                bar.refresh()

        clock = threading.Thread(target=redraw, daemon=True, name="qb-progress")
        clock.start()
    try:
        yield bar
    finally:
        stop.set()
        if clock is not None:
            clock.join()
        bar.close()
