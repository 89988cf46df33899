"""Records <-> stage tables, with dtypes taken from the pydantic model so empty tables still validate."""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd
from pydantic import BaseModel

_DTYPES = {int: "int64", float: "float64", bool: "bool", dt.date: "datetime64[ns]"}


def _dtype(annotation: object) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return _DTYPES.get(annotation, "object")  # type: ignore[arg-type]


@lru_cache(maxsize=64)
def _column_dtypes(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    return tuple((name, _dtype(field.annotation)) for name, field in model.model_fields.items())


def records_to_frame(records: Sequence[BaseModel], model: type[BaseModel]) -> pd.DataFrame:
    """Built column by column from plain arrays (the records are flat: a field's value is its cell, as model_dump
    gives it): eight tables per paper, and pandas' per-column conversions of a frame built record by record were
    most of their cost. Same dtypes and values: object columns hold None for a missing value."""
    columns: dict[str, object] = {}
    for name, dtype in _column_dtypes(model):
        values = [getattr(r, name) for r in records]
        if dtype == "object":
            column = np.empty(len(values), dtype=object)
            column[:] = [None if _missing(v) else v for v in values]
        elif dtype == "datetime64[ns]":
            column = pd.to_datetime(pd.Series(values, dtype=object))
        else:
            column = np.array(values, dtype=dtype)
        columns[name] = column
    return pd.DataFrame(columns, columns=[name for name, _ in _column_dtypes(model)])


def _missing(value: object) -> bool:
    """What pandas' notna calls missing, for a scalar cell."""
    return value is None or (isinstance(value, float) and value != value) or value is pd.NaT or value is pd.NA


def frame_to_records(frame: pd.DataFrame, model: type[BaseModel]) -> list[BaseModel]:
    rows = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
    out = []
    for row in rows:
        for key, value in row.items():
            if isinstance(value, pd.Timestamp):
                row[key] = value.date()
        out.append(model.model_validate(row))
    return out
