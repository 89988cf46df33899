"""SIGINT / SIGTERM during a long command (`karma run`, `karma backfill --here`): stop cleanly, say what remains.

The first signal stops the document (or KG increment) in progress — Dagster turns it into an interrupted step,
so the stage or merge in flight is abandoned (stage tables are written temp + rename, a merge is one transaction)
and the document stays pending — and no further document or increment starts; the command then exits 128 +
the signal number (130 Ctrl-C, 143 SIGTERM). A second signal quits at once (exit 128 + signal, like a SIGKILL
the stores are built to survive).

Why a wakeup pipe and a thread: while Dagster executes a run in process it replaces the Python handlers of
SIGINT and SIGTERM with its own (the same one for both), so a handler of ours would not see which signal came,
nor a second one. The signal module writes every caught signal's number to the wakeup fd whatever Python
handler is installed; a thread reading it knows the first signal and can force-quit on the second.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """Raised where an interrupted command stops; carries what was in progress and what never started.

    A KeyboardInterrupt (a BaseException) so that `except Exception` on the way up does not swallow it."""

    def __init__(self, signum: int, during: str = "", run_id: str = "") -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.during = during  # the document or increment that was stopped ("" between two of them)
        self.run_id = run_id  # its Dagster run
        self.stopped: list[str] = []  # the items `during` stopped (a day's run: its documents)
        self.finished: list[str] = []  # items done before the stop (filled in on the way up)
        self.remaining: list[str] = []  # documents and increments not started (filled in on the way up)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class InterruptWatch:
    """Records SIGINT/SIGTERM for the duration of a `with` block (main thread only).

    During a Dagster run, Dagster's handlers interrupt the run and `signum` says which signal it was; between
    runs our handlers only record it, and the runner stops at its next checkpoint (`check`), except inside
    `interruptible()` (the inbox scan), where it stops at once."""

    def __init__(self, *, on_force_quit: str = "second interrupt: quitting now") -> None:
        self.signum: int | None = None
        self._seen = threading.Event()
        self._message = on_force_quit
        self._pipe: tuple[int, int] | None = None
        self._saved: dict[int, object] = {}
        self._saved_fd = -1
        self._raise_now = False

    # ---------------------------------------------------------------- what the runner asks
    def wait(self, timeout_s: float = 0.0) -> int | None:
        """The first signal received, waiting up to `timeout_s` for the reader thread to have seen it."""
        if timeout_s > 0 and self._pipe is not None:
            self._seen.wait(timeout_s)
        return self.signum

    def check(self, during: str = "", timeout_s: float = 0.0) -> None:
        """Raise RunInterrupted if a signal came (the checkpoint between two documents or increments)."""
        if (signum := self.wait(timeout_s)) is not None:
            raise RunInterrupted(signum, during)

    @contextmanager
    def interruptible(self, during: str) -> Iterator[None]:
        """A block a signal may stop at any point (it holds no half-written state: the inbox scan)."""
        self.check(during)
        self._raise_now = True
        try:
            yield
        except RunInterrupted as exc:
            exc.during = exc.during or during
            raise
        finally:
            self._raise_now = False

    # ---------------------------------------------------------------- set-up
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._record(signum)
        if self._raise_now:
            raise RunInterrupted(signum)

    def _record(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
            self._seen.set()
        # a second signal is handled by the reader thread (it sees every one, whatever handler is installed)

    def _read(self, fd: int) -> None:
        count = 0
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                data = b""
            if not data:
                os.close(fd)
                return
            for signum in data:
                if signum not in SIGNALS:
                    continue
                count += 1
                self._record(signum)
                if count >= 2:
                    sys.stderr.write(f"\n{self._message} ({signal.Signals(signum).name})\n")
                    sys.stderr.flush()
                    os._exit(128 + signum)

    def __enter__(self) -> InterruptWatch:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals are delivered to the main thread only: nothing to watch from elsewhere
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._saved_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        for signum in SIGNALS:
            self._saved[signum] = signal.signal(signum, self._on_signal)
        threading.Thread(target=self._read, args=(r,), name="karma-interrupts", daemon=True).start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._pipe is None:
            return
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._saved_fd)
        os.close(self._pipe[1])  # the reader thread sees end of file and stops; it closes nothing itself
        self._pipe = None


class _NoWatch(InterruptWatch):
    """No handlers installed (library use, tests in process): never interrupted."""

    def wait(self, timeout_s: float = 0.0) -> int | None:
        return None

    @contextmanager
    def interruptible(self, during: str) -> Iterator[None]:
        yield


_active: list[InterruptWatch] = []


def active() -> InterruptWatch:
    """The watch a command installed (`watching`), or one that never fires: signals are process-wide, so the
    runner asks here instead of every function passing the watch down."""
    return _active[-1] if _active else _NoWatch()


class watching:  # noqa: N801 - used as `with interrupts.watching():`
    """Install an InterruptWatch and make it the active one for the block."""

    def __init__(self) -> None:
        self.watch = InterruptWatch()

    def __enter__(self) -> InterruptWatch:
        self.watch.__enter__()
        _active.append(self.watch)
        return self.watch

    def __exit__(self, *exc: object) -> None:
        _active.remove(self.watch)
        self.watch.__exit__(None, None, None)
