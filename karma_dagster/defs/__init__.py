"""Everything Dagster sees: assets (orchestration only), sensors and the definitions builder."""
