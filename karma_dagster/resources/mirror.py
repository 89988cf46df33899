"""Dagster Config classes mirrored from the core's pydantic models, so every default is declared once.

Dagster needs its own Config/ConfigurableResource base classes to show a setting in the launchpad and to
take an EnvVar; the core (config.py, params.py) must not import Dagster. `mirror` builds the former from the
latter field by field (types, defaults, bounds, descriptions), nested models included.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, Field, create_model

from karma_dagster.resources.strict import StrictConfig


def _dagster_type(annotation: Any) -> Any:
    """Dagster config has no Literal: a Literal of strings (also inside a list) becomes str; the core model
    still checks the value when the settings are built from the config (e.g. `settings_of`)."""
    if get_origin(annotation) is Literal:
        return str
    if get_origin(annotation) is list and get_args(annotation) and get_origin(get_args(annotation)[0]) is Literal:
        return list[str]
    return annotation


def mirror(model: type[BaseModel], base: type[BaseModel] = StrictConfig, name: str | None = None,
           defaults: dict[str, Any] | None = None) -> Any:
    """A `base` subclass with `model`'s fields; `defaults` overrides field defaults (Dagster reads a nested
    config's defaults from its class, so a nested field gets a class whose defaults are the core's value)."""
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            value = (defaults or {}).get(field_name) or info.get_default(call_default_factory=True).model_dump()
            nested = mirror(annotation, name=f"{model.__name__}_{field_name}", defaults=value)
            fields[field_name] = (nested, Field(default_factory=nested, description=info.description))
        elif defaults and field_name in defaults:
            fields[field_name] = (annotation, Field(default=defaults[field_name], description=info.description))
        else:
            fields[field_name] = (_dagster_type(annotation), info)
    return create_model(name or f"{model.__name__}Config", __base__=base, **fields)
