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
  long batch (a 1,024-token story on a CPU) is in flight: a run that is working never looks hung;
- when stderr is not a terminal (a log file, a pipe, a job scheduler), a bar redrawn in place would fill the log with
  carriage returns, so none is drawn; instead one line is written there every :data:`LOG_EVERY_S` seconds
  (:class:`ProgressLog`: the step, done/total, the rate and the ETA), and a last one when a step that wrote any
  ends, so a long run's log says how far it has got.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["LOG_EVERY_S", "REFRESH_S", "SMOOTHING", "ProgressLog", "progress_bar"]

REFRESH_S = 5.0
"""How often (seconds) an open bar is redrawn while nothing finishes."""
SMOOTHING = 0.05
"""tqdm's exponential moving-average factor for the rate (0: the average since the start; tqdm's default 0.3)."""
LOG_EVERY_S = 30.0
"""How often (seconds) a step writes its progress line when stderr is not a terminal."""


def _duration(seconds: float) -> str:
    """``1:02:03``, ``4:05`` (minutes and seconds under an hour)."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class ProgressLog:
    """A progress bar's stand-in for a log: it counts like a tqdm bar (``update``, ``n``, ``total``) and writes one
    line (``queerbench: predicting: 120/7,931 sent (1.5%), 0.42 sent/s, ETA 5:10:03``) when ``every`` seconds have
    passed since the step began or since its last line, whether an item finished then (:meth:`update`) or not
    (:meth:`refresh`, called by the clock thread); :meth:`close` writes a last line if it wrote any. The rate is the
    items finished since the step began over its time. ``clock`` and ``write`` are injectable for tests."""

    disable = False

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        *,
        initial: int = 0,
        every: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], Any] = _stderr_line,
    ) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self._start_n, self._every, self._clock, self._write = initial, every, clock, write
        self._started = self._last = clock()
        self._lock = threading.Lock()
        self.lines = 0
        """Lines written so far."""

    def line(self) -> str:
        """The progress line for now."""
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = (self.n - self._start_n) / elapsed
        share = f" ({100 * self.n / self.total:.1f}%)" if self.total else ""
        left = max(self.total - self.n, 0)
        eta = _duration(left / rate) if rate > 0 else "?"
        return (
            f"queerbench: {self.desc}: {self.n:,}/{self.total:,} {self.unit}{share}, {rate:.3g} {self.unit}/s, "
            f"elapsed {_duration(elapsed)}, ETA {eta}"
        )

    def _maybe_write(self) -> None:
        with self._lock:
            now = self._clock()
            if self._every > 0 and now - self._last >= self._every:
                self._last = now
                self.lines += 1
                self._write(self.line())

    def update(self, n: int = 1) -> None:
        """``n`` more items finished."""
        with self._lock:
            self.n += n
        self._maybe_write()

    def refresh(self) -> None:
        """Write the line if its time has come (nothing finished since)."""
        self._maybe_write()

    def close(self) -> None:
        """A last line, for a step that wrote any (a short step writes nothing)."""
        with self._lock:
            if self.lines:
                self.lines += 1
                self._write(self.line())


@contextmanager
def progress_bar(
    total: int,
    desc: str,
    unit: str,
    *,
    disable: bool = False,
    refresh_s: float = REFRESH_S,
    log_every_s: float = LOG_EVERY_S,
    **options: Any,
) -> Iterator[Any]:
    """A ``tqdm.auto`` bar of ``total`` items, closed on exit; ``options`` go to tqdm (``file``, ``mininterval``).

    ``refresh_s`` (0: never) is the redraw period of the clock thread, which stops when the block ends. Without a
    ``file`` the bar goes to stderr only when stderr is a terminal: a log file or a pipe gets a
    :class:`ProgressLog` instead, one line every ``log_every_s`` seconds (0: none), not a bar redrawn in place.
    """
    from tqdm.auto import tqdm

    logged = not disable and "file" not in options and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    bar: Any
    if logged and log_every_s > 0:
        bar = ProgressLog(total, desc, unit, initial=int(options.get("initial") or 0), every=log_every_s)
        refresh_s = min(refresh_s, log_every_s) if refresh_s > 0 else log_every_s
    else:
        options = {"smoothing": SMOOTHING, "dynamic_ncols": True, **options}
        bar = tqdm(total=total, desc=desc, unit=unit, disable=disable or logged, **options)
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
