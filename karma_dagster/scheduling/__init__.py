"""Scheduling: the Central Controller (CCA) that orders pending document runs."""
