"""Dagster config and resource bases whose unknown keys are errors naming the closest valid key.

Dagster's Config / ConfigurableResource accept an unknown keyword silently (`KarmaStorageResource(data_dr=...)`
would keep the data in $DAGSTER_HOME/karma); run config from the launchpad is already checked by Dagster's schema.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import model_validator

from karma_dagster.runtime.strict_keys import check_keys


class StrictConfig(dg.Config):
    @model_validator(mode="before")
    @classmethod
    def _known_keys_only(cls, data: Any) -> Any:
        check_keys(data, cls.model_fields, cls.__name__)
        return data


class StrictResource(dg.ConfigurableResource):
    @model_validator(mode="before")
    @classmethod
    def _known_keys_only(cls, data: Any) -> Any:
        check_keys(data, cls.model_fields, cls.__name__)
        return data
