"""Measuring what a backbone's chain did: KARMA's graph metrics, gold scores, and the side-by-side comparison.

Plain Python (no Dagster): the assets in defs/assets/comparison.py and the CLI call these functions.
"""
