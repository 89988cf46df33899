"""Feature ablation of the local backbone's document-level relation model: drop one feature group, retrain on the
training corpora, score the dev splits (issue 15's closing table).

    python bench/biored_ablation.py [--biored FILE] [--cdr FILE] [--groups dist cnt ...] [--no-end-to-end]

Per variant (the model before issue 15's second round: no `hyp`/`role`/`kg` groups, no type-pair head, multi-label;
all groups without the refinements (the chemical-disease head, one type per pair); all groups; then all but
one): relations from the gold mentions (with their gold ids, as the
end-to-end chain passes its own: the `prior` group reads them) on BioRED dev (pair, pair + type) and BC5CDR dev
(CID); and end to end, the EEA's own mentions and ids (computed once, shared by every variant) through the REA
with its 5 sampled answers, as `karma gold-eval` does. Each variant trains once (~40 s on 2 cores) and is cached
under --cache-dir. Only the training corpora are fitted on; the dev files are only scored.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from karma_dagster.agents.entity_extraction import extract_entities_counted
from karma_dagster.agents.relation_extraction import extract_relations
from karma_dagster.backbones.local import LocalBackbone
from karma_dagster.backbones.local.doc_features import FEATURE_GROUPS
from karma_dagster.backbones.local.doc_relations import DocRelationModel
from karma_dagster.backbones.local.relations import RELATION_TYPES, LocalRelationModel, coarse_type
from karma_dagster.ingest.pubtator import PubTatorDoc, read_pubtator
from karma_dagster.metrics.gold import PredictedMention, PredictedTriple, comparable_id, score_gold
from karma_dagster.metrics.gold_relations import evaluate_entities
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.records import MentionRow, SummaryRow

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
ABLATABLE = tuple(g for g in FEATURE_GROUPS if g != "type")  # the type pair is every example's first feature


def _summary(doc: PubTatorDoc) -> SummaryRow:
    key = f"pmid-{doc.pmid}"
    return SummaryRow(doc_key=key, summary_id=f"{key}:full", segment_id=f"{key}:full", section="abstract",
                      text=doc.text, n_sentences_in=0, n_sentences_out=0)


def _is_cdr(docs: list[PubTatorDoc]) -> bool:
    return {r.relation for d in docs for r in d.relations} == {"CID"}


def gold_mention_scores(docs: list[PubTatorDoc], model: DocRelationModel, params: KarmaParams) -> tuple[float, float]:
    """(pair F1, pair + type F1) from the gold mentions; BC5CDR: CID F1 twice."""
    cdr = _is_cdr(docs)

    def fn(text, entities, pairs):
        answers = model.probabilities(text, entities, pairs)
        if not cdr:
            return answers
        return [{"CID": p["Positive_Correlation"] if {coarse_type(entities[i][0].type), coarse_type(entities[j][0].type)}
                 == {"Chemical", "Disease"} else 0.0} for p, (i, j) in zip(answers, pairs, strict=True)]

    theta = (lambda _r: params.theta_for("Positive_Correlation")) if cdr else params.theta_for
    s = evaluate_entities(docs, fn, theta, ["CID"] if cdr else list(RELATION_TYPES))
    return s.pair.f1, s.pair_type.f1


def end_to_end_scores(docs: list[PubTatorDoc], rows: list[list[MentionRow]], backbone: LocalBackbone,
                      params: KarmaParams) -> tuple[float, float]:
    mentions, triples = [], []
    for doc, ms in zip(docs, rows, strict=True):
        ts = extract_relations([_summary(doc)], ms, backbone, params) if ms else []
        ids = {m.mention_id: comparable_id(m.vocab_id, m.kg_id)[0] for m in ms}
        mentions.append([PredictedMention(start=m.start, end=m.end, text=m.text, type=m.type, vocab_id=m.vocab_id,
                                          kg_id=m.kg_id) for m in ms])
        triples.append([PredictedTriple(head_vocab_id=ids.get(t.head_mention_id), tail_vocab_id=ids.get(t.tail_mention_id),
                                        head_type=t.head_type, tail_type=t.tail_type, relation=t.relation,
                                        probability=t.probability) for t in ts])
    s = score_gold(docs, mentions, triples).relations
    return s.pair.f1, s.pair_type.f1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--biored", type=Path, default=SHARED / "biored" / "Dev.PubTator")
    ap.add_argument("--cdr", type=Path, default=SHARED / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt")
    ap.add_argument("--groups", nargs="*", default=list(ABLATABLE), choices=ABLATABLE,
                    help="the groups to drop one at a time (default: all)")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/local-backbone"))
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="pipeline data folder whose seed KG and entity index the EEA links to (default: $DAGSTER_HOME/karma)")
    ap.add_argument("--no-end-to-end", action="store_true", help="gold mentions only (no lexicon, no entity index)")
    args = ap.parse_args(argv)
    files = {"BioRED dev": args.biored, "BC5CDR dev": args.cdr}
    for name, path in files.items():
        if not path.is_file():
            ap.error(f"{name}: {path} not found")
    docs = {name: read_pubtator(path) for name, path in files.items()}
    params = KarmaParams()

    rows: dict[str, list[list[MentionRow]]] = {}
    backbone_parts = None
    if not args.no_end_to_end:
        from karma_dagster.runtime import services

        data = DataPaths(args.data_dir or "", "", args.cache_dir)
        if not data.kg.exists():
            ap.error(f"no seed KG at {data.kg}: run `karma gold-eval` (it imports the seed) or pass --data-dir")
        ner, index = services.dictionary(data), services.entity_index(data)
        backbone_parts = (ner, LocalRelationModel(args.cache_dir / "relations"))
        t0 = time.perf_counter()
        probe = LocalBackbone(*backbone_parts, doc_relations=DocRelationModel(args.cache_dir / "relations"))
        for name, ds in docs.items():
            rows[name] = [extract_entities_counted([_summary(d)], probe, ner, index, params).rows for d in ds]
        print(f"EEA over {sum(len(d) for d in docs.values())} abstracts in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)

    header = ("| dropped | train s | CV pair+type (train) | CV CID head (train) | BioRED pair (gold m.) "
              "| pair+type (gold m.) | CID (gold m.) |")
    sep = "|---|---:|---:|---:|---:|---:|---:|"
    if rows:
        header += " BioRED pair (e2e) | pair+type (e2e) | CID (e2e) |"
        sep += "---:|---:|---:|"
    print(header)
    print(sep)
    variants: list[tuple[str, list[str], bool]] = [
        ("before (no hyp, role, kg, head, one type)", [g for g in FEATURE_GROUPS if g not in ("hyp", "role", "kg")],
         False),
        ("all groups, no head, multi-label", list(FEATURE_GROUPS), False),
        ("(none)", list(FEATURE_GROUPS), True),
    ] + [(d, [g for g in FEATURE_GROUPS if g != d], True) for d in args.groups]
    for dropped, groups, refined in variants:
        model = DocRelationModel(args.cache_dir / "relations", groups=groups, refinements=refined)
        secs = model.fitted.train_seconds  # kept in the cached model: its first-use training time
        bp, bpt = gold_mention_scores(docs["BioRED dev"], model, params)
        cid, _ = gold_mention_scores(docs["BC5CDR dev"], model, params)
        cv = model.fitted.cv_f1  # out-of-fold on train: what the model is chosen by (dev is only scored)
        head = cv.get("Positive_Correlation@Chemical|Disease")
        cv_head = "–" if head is None else f"{head:.3f}"  # a variant without the chemical-disease head
        line = (f"| {dropped} | {secs:.0f} | {cv.get('pair+type', 0.0):.3f} | {cv_head} | {bp:.3f} | {bpt:.3f} "
                f"| {cid:.3f} |")
        if rows and backbone_parts is not None:
            bb = LocalBackbone(*backbone_parts, doc_relations=model)
            ep, ept = end_to_end_scores(docs["BioRED dev"], rows["BioRED dev"], bb, params)
            ecid, _ = end_to_end_scores(docs["BC5CDR dev"], rows["BC5CDR dev"], bb, params)
            line += f" {ep:.3f} | {ept:.3f} | {ecid:.3f} |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
