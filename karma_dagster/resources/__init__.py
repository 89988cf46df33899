"""Dagster resources: thin, configurable look-ups of the plain-Python stores, backbones and parameters.

They hold settings (editable in the launchpad, secrets through EnvVar) and hand out what `services` built;
no logic of their own.
"""
