"""Dagster resources: thin, configurable wrappers around the plain-Python stores, indexes and backbones."""
