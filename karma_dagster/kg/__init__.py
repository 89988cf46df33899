"""The knowledge graph: its schema, the DuckDB store, seed import and the merge of accepted triples."""
