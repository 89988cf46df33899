"""Run by the kgx venv (.venv-kgx, scripts/kgx_venv.sh), not by the project's: read a KGX TSV pair with kgx's own
Transformer and TSV source and print what it read as JSON ({"nodes": {id: props}, "edges": [props]}).

kgx loads the Biolink Model and its JSON-LD context from GitHub when imported; offline, as the project's users
run, it is pointed at the copies the biolink-model package ships (the same model the export maps to).
Usage: python kgx_read.py NODES.tsv EDGES.tsv
"""

import functools
import json
import sys
from importlib import resources

import bmt

SCHEMA = str(resources.files("biolink_model") / "schema" / "biolink_model.yaml")
PREFIXES = json.loads((resources.files("biolink_model") / "prefixmaps" / "biolink-model-prefix-map.json").read_text())
bmt.Toolkit.__init__ = functools.partialmethod(bmt.Toolkit.__init__, schema=SCHEMA,
                                               predicate_map={"predicate mappings": []})

import kgx.config  # noqa: E402 - after the offline patch

kgx.config.jsonld_context_map["biolink"] = PREFIXES
from kgx.transformer import Transformer  # noqa: E402

nodes_path, edges_path = sys.argv[1], sys.argv[2]
t = Transformer(stream=False)
t.transform({"filename": [nodes_path, edges_path], "format": "tsv"})
graph = t.store.graph
out = {"nodes": {n: dict(d) for n, d in graph.nodes(data=True)},
       "edges": [dict(d) for _, _, _, d in graph.edges(keys=True, data=True)]}
json.dump(out, sys.stdout, default=str)
