"""Scoring of stage outputs against gold corpora (mentions, identifiers)."""
