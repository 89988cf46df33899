"""CogMG (Zhou et al., "CogMG: Collaborative Augmentation Between Large Language Model and Knowledge Graph"):
questions the KG cannot answer name the triples it lacks; those are completed, verified against the ingested
literature and wait for review. Dagster-free: the assets (assets/questions.py) only orchestrate it.

questions.py (versioned question files) -> decompose_local.py / llm.py (query steps) -> plan.py (the typed plan
over DuckDB, up to two hops) -> answer.py (hit or missing triples) -> write.py (a hit's answer, every claim citing
its triple) -> complete.py + verify.py (fills, BM25 passages.py) ->
pipeline.py (one question end to end) -> benchmark.py (the three hit rates); store.py keeps answers and
completions per question; cli_ask.py is `karma ask` (a miss's completions go to the review queue).
"""
