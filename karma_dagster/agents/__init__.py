"""The KARMA agents as plain functions: build a stage's inputs, ask the backbone, check and shape its answer.

No Dagster import here: the assets in `defs/assets` orchestrate, these modules hold the stage logic.
"""
