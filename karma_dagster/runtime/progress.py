"""Rate and ETA of a long run (documents of `karma run`), from the work finished so far.

No live bar: the caller prints one whole line per document through its `log`, so a terminal, a pipe and a CI
log all read the same (no carriage returns). The rate is the wall time since the run started over the documents
finished, and the time left is that rate times the documents not finished yet: documents that finish together
(a batch of several in one Dagster run) are counted finished together, so no line promises time for work that
is already done. tqdm formats it (`12.3s/doc` when a document takes longer than a second, `4.56doc/s` otherwise;
`ETA 01:02:03`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tqdm import tqdm

_METER = "{rate_fmt}, ETA {remaining}"


class Progress:
    """`finished(n)` when n documents have just finished returns e.g. `12.3s/doc, ETA 03:25`; `step()` is
    `finished(1)`. `clock` is injectable so tests need not sleep."""

    def __init__(self, total: int, unit: str = "doc", clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.unit, self._clock = total, unit, clock
        self.done = 0
        self._started = clock()

    def finished(self, n: int = 1) -> str:
        self.done += n
        return self.meter()

    def step(self) -> str:
        return self.finished(1)

    def meter(self) -> str:
        """The rate and time left as of now, from the documents finished so far."""
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = self.done / elapsed if self.done else None
        return tqdm.format_meter(n=self.done, total=max(self.total, self.done), elapsed=elapsed, unit=self.unit,
                                 rate=rate, bar_format=_METER).strip()

    def close(self) -> None:
        return None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
