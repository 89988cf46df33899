"""One review queue for everything that needs a person (CogMG completions, KARMA's schema-review and unresolved-
conflict triples, new relation types), its decisions, their merge into the KG, and the page that serves it.
Dagster-free: the page is Starlette, the queue SQLite, the merge kg/merge.py."""
