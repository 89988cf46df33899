"""What every tool answers: ok or refused, a message a model can act on, and the data it found or wrote.

A refusal is an answer, not an exception: the model reads the message ("no class 'Protien'; did you mean
'Protein'?") and calls again. Exceptions are kept for broken stores, which no retry can fix.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ToolResult(BaseModel):
    ok: bool
    message: str
    data: dict[str, Any] = {}

    def text(self) -> str:
        """The one line a model sees first: refused or done, and why."""
        return ("OK: " if self.ok else "REFUSED: ") + self.message


class Refused(ValueError):
    """A call that fails validation; its message is what the caller reads. Nothing has been written."""


def did_you_mean(options: list[str], what: str) -> str:
    """'; did you mean 'A' or 'B'?' naming the closest `what`s, or '' when none is close."""
    if not options:
        return ""
    shown = " or ".join(options[:3])  # display strings, quoted by the caller where they are labels
    return f"; did you mean {shown}? ({what})"
