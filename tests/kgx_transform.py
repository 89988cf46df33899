"""Run by the kgx venv (.venv-kgx, scripts/kgx_venv.sh), not by the project's: read a KGX TSV pair with kgx's own
Transformer, validate the graph with kgx's own Validator and write it back with kgx's TSV sink; print, as the last
line, a JSON list with one {"errors": {level: {error type: {message: [entities]}}}, "nodes": n, "edges": n} per pair.
(kgx tells a node file from an edge file by its name: "..._nodes.tsv", "..._edges.tsv".)

Offline as in kgx_read.py: bmt and kgx's JSON-LD context are pointed at the biolink-model package's copies.
Usage: python kgx_transform.py NODES.tsv EDGES.tsv OUT_PREFIX [NODES EDGES OUT_PREFIX ...]
       (writes OUT_PREFIX_nodes.tsv and OUT_PREFIX_edges.tsv; OUT_PREFIX "-": validate only)
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
from kgx.validator import Validator  # noqa: E402

out = []
args = sys.argv[1:]
for i in range(0, len(args), 3):
    nodes_path, edges_path, out_prefix = args[i:i + 3]
    t = Transformer(stream=False)
    t.transform({"filename": [nodes_path, edges_path], "format": "tsv"},
                output_args=None if out_prefix == "-" else {"filename": out_prefix, "format": "tsv"})
    validator = Validator()
    validator.validate(t.store.graph)
    out.append({"errors": validator.get_errors(), "nodes": t.store.graph.number_of_nodes(),
                "edges": t.store.graph.number_of_edges()})
print()
print(json.dumps(out, default=str))
