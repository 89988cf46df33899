"""The KARMA formulas' parameters as a Dagster resource: KarmaParams mirrored, editable in the launchpad."""

from __future__ import annotations

from karma_dagster.runtime.params import KarmaParams
from karma_dagster.resources.mirror import mirror
from karma_dagster.resources.strict import StrictResource


class KarmaParamsResource(mirror(KarmaParams, StrictResource, "KarmaParamsSettings")):  # type: ignore[misc]
    """Every field, default and bound is KarmaParams' (params.py); this only makes them Dagster config."""

    def params(self) -> KarmaParams:
        return KarmaParams.model_validate(self.model_dump())
