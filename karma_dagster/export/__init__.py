"""Exports of the KG as of a date: RDF/Turtle, KGX TSV (Biolink) and Neo4j import CSVs. Dagster-free.

Every format reads the same snapshot (snapshot.py: nodes, edges valid on the date, their live evidence and the
supersessions by then) and writes its files into one folder; `export.run.export_kg` is the one entry point.
KGX also comes in (kgx_import.py: `karma import-kg --format kgx`), through the same Biolink mapping read backwards.
"""

FORMATS = ("turtle", "kgx", "neo4j")
