"""Rate and ETA of a long run (documents of `karma run`), computed and formatted by tqdm.

No live bar: the caller prints one whole line per document through its `log`, so a terminal, a pipe and a CI
log all read the same (no carriage returns). tqdm keeps the smoothed rate and formats it (`12.3s/doc` when a
document takes longer than a second, `4.56doc/s` otherwise) and the time left (`ETA 01:02:03`).
"""

from __future__ import annotations

from tqdm import tqdm

_METER = "{rate_fmt}, ETA {remaining}"


class _Discard:
    """tqdm's output file: it renders its bar on every update, which nobody reads (the caller prints lines)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None


class Progress:
    """`step()` after each finished document returns e.g. `12.3s/doc, ETA 03:25`."""

    def __init__(self, total: int, unit: str = "doc", smoothing: float = 0.3) -> None:
        self._bar = tqdm(total=total, unit=unit, file=_Discard(), mininterval=0, miniters=1, smoothing=smoothing,
                         dynamic_ncols=False, ncols=80)

    def step(self) -> str:
        self._bar.update(1)
        return tqdm.format_meter(**{**self._bar.format_dict, "bar_format": _METER}).strip()

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
