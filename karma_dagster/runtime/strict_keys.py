"""Unknown configuration keys are errors that name the key and the closest valid one.

pydantic's extra="forbid" says only "Extra inputs are not permitted", and Dagster's Config / ConfigurableResource
accept unknown keyword arguments silently: a typo such as `delt` or `data_dr` would run with the default. One
check, used by the core's models (params.py) and the Dagster resources' configs (resources/strict.py).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


def closest(word: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest option, '' when none is close."""
    match = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


def check_keys(data: Any, known: Iterable[str], where: str) -> None:
    """Raise ValueError naming each key of the mapping `data` that is not in `known`; anything else passes (the
    model's own validation reports a wrong type)."""
    if not isinstance(data, dict):
        return
    known = list(known)
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ValueError("; ".join(f"unknown key {str(k)!r} in {where}{closest(str(k), known)}" for k in unknown)
                         + f"; valid keys: {', '.join(known)}")


class StrictModel(BaseModel):
    """A model whose unknown keys are errors naming the closest valid key."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys_only(cls, data: Any) -> Any:
        check_keys(data, cls.model_fields, cls.__name__)
        return data
