"""Records <-> stage tables, with dtypes taken from the pydantic model so empty tables still validate."""

from __future__ import annotations

import datetime as dt
import types
import typing
from collections.abc import Sequence

import pandas as pd
from pydantic import BaseModel

_DTYPES = {int: "int64", float: "float64", bool: "bool", dt.date: "datetime64[ns]"}


def _dtype(annotation: object) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return _DTYPES.get(annotation, "object")  # type: ignore[arg-type]


def records_to_frame(records: Sequence[BaseModel], model: type[BaseModel]) -> pd.DataFrame:
    columns = list(model.model_fields)
    frame = pd.DataFrame([r.model_dump() for r in records], columns=columns)
    for name, field in model.model_fields.items():
        dtype = _dtype(field.annotation)
        if dtype == "object":
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
        else:
            frame[name] = frame[name].astype(dtype) if dtype != "datetime64[ns]" else pd.to_datetime(frame[name])
    return frame


def frame_to_records(frame: pd.DataFrame, model: type[BaseModel]) -> list[BaseModel]:
    rows = frame.astype(object).where(frame.notna(), None).to_dict(orient="records")
    out = []
    for row in rows:
        for key, value in row.items():
            if isinstance(value, pd.Timestamp):
                row[key] = value.date()
        out.append(model.model_validate(row))
    return out
