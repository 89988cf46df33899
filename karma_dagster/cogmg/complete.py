"""Filling missing triples: on `local` from the chain's own unaccepted candidates and from relation extraction
over retrieved passages; on an LLM backbone from the model. Every fill is then verified (cogmg/verify.py).

Candidates are the triples the chain extracted but did not accept (the furthest stage table each document has:
evaluated rows with accepted = false, else resolved / aligned / relations rows), mapped to the KG schema by their
aligned relation or, for a schema-review row, by the schema's label table.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd

from karma_dagster.runtime import services
from karma_dagster.cogmg import llm
from karma_dagster.cogmg.models import Completion, LinkedEntity, OpenTriple
from karma_dagster.cogmg.passages import passage_index
from karma_dagster.kg.embeddings import normalize_name
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.runtime.paths import DataPaths
from karma_dagster.schemas.records import MentionSpan
from karma_dagster.runtime.stage_store import StageStore

CANDIDATE_STAGES = ("evaluated", "resolved", "aligned", "relations")  # furthest first
RE_MIN_PROBABILITY = 0.5  # a passage pair's classifier p for a label that maps to the missing relation
RE_PASSAGES = 5


def candidate_rows(data: DataPaths, namespace: str) -> pd.DataFrame:
    """Every triple of the namespace's chain that was not accepted, from each document's furthest stage table."""
    store = StageStore(data.stages_dir)
    frames = []
    done: set[str] = set()
    for stage in CANDIDATE_STAGES:
        for doc in store.partitions(namespace, stage):
            if doc in done:
                continue
            done.add(doc)
            frame = store.read(namespace, stage, doc)
            if "accepted" in frame:
                frame = frame[~frame["accepted"].astype(bool)]
            frames.append(frame.assign(stage=stage))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _kg_relation(row: pd.Series) -> tuple[str | None, bool]:
    """(KG relation, swapped) of a candidate row: its aligned relation, else the label mapped by the schema."""
    if isinstance(row.get("kg_relation"), str) and row["kg_relation"]:
        return row["kg_relation"], False
    schema = services.kg_schema()
    kinds = [row.get("head_kg_type") or schema.kind_for_ner_type(str(row.get("head_type", ""))),
             row.get("tail_kg_type") or schema.kind_for_ner_type(str(row.get("tail_type", "")))]
    if not all(isinstance(k, str) and k for k in kinds):
        return None, False
    mapped = schema.map_label(str(row["relation"]), kinds[0], kinds[1])
    return (mapped[0].relation, mapped[1]) if mapped else (None, False)


def _row_kind(row: pd.Series, end: str) -> str:
    kind = row.get(f"{end}_kg_type")
    return kind if isinstance(kind, str) else (services.kg_schema().kind_for_ner_type(str(row.get(f"{end}_type", "")))
                                               or "")


def from_candidates(missing: OpenTriple, question_id: str, question: str, backbone: str,
                    rows: pd.DataFrame) -> list[Completion]:
    out: list[Completion] = []
    if rows.empty:
        return out
    near = rows[(rows["head_id"] == missing.known_id) | (rows["tail_id"] == missing.known_id)]
    for _, row in near.iterrows():
        relation, swapped = _kg_relation(row)
        if relation != missing.relation:
            continue
        src, dst = ("tail", "head") if swapped else ("head", "tail")  # the row's ends in the metaedge's order
        symmetric = _row_kind(row, "head") == _row_kind(row, "tail")  # Gene-Gene: either order states it
        if row[f"{src}_id"] == missing.known_id and (missing.known_end == "head" or symmetric):
            known, ans = src, dst
        elif row[f"{dst}_id"] == missing.known_id and (missing.known_end == "tail" or symmetric):
            known, ans = dst, src
        else:
            continue
        if missing.answer_kinds and _row_kind(row, ans) not in missing.answer_kinds:
            continue
        h, t = (known, ans) if missing.known_end == "head" else (ans, known)
        score = row.get("evidence_score") if pd.notna(row.get("evidence_score", None)) else row.get("probability")
        out.append(Completion(
            question_id=question_id, question=question, backbone=backbone, head_id=row[f"{h}_id"],
            head_name=row[f"{h}_name"], relation=relation, tail_id=row[f"{t}_id"], tail_name=row[f"{t}_name"],
            head_kind=_row_kind(row, h), tail_kind=_row_kind(row, t), method="candidate", passages=[],
            supported=False, score=0.0, evidence_doc_keys=[str(row["doc_key"])], evidence=str(row["evidence"]),
            fill_score=float(score or 0.0)))
    return out


def _passage_entities(text: str, data: DataPaths, namespace: str, rho: float
                      ) -> list[tuple[MentionSpan, LinkedEntity | None]]:
    """The passage's mentions linked like the chain links them (one batched index search), cached per text and
    index state: passages recur across questions."""
    index = services.linkable_index(data, namespace)
    key = ("cogmg_passage_entities", str(data.root), namespace, index.index.synced_fingerprint(namespace),
           hashlib.sha256(text.encode()).hexdigest())
    return services.cached(key, lambda: _link_all(text, data, index, rho))


def _link_all(text: str, data: DataPaths, index, rho: float) -> list[tuple[MentionSpan, LinkedEntity | None]]:  # noqa: ANN001
    schema = services.kg_schema()
    mentions = services.dictionary(data).recognize(text)
    hits = index.search([m.long_form or m.text for m in mentions], [m.type for m in mentions], k=1)
    out: list[tuple[MentionSpan, LinkedEntity | None]] = []
    for m, hit in zip(mentions, hits):
        name = m.long_form or m.text
        if hit and hit[0].distance <= rho:
            h = hit[0]
            out.append((m, LinkedEntity(mention=m.text, entity_id=h.entity_id, name=h.name, kind=h.kind,
                                        distance=h.distance)))
            continue
        kind = schema.kind_for_ner_type(m.type)
        out.append((m, None if not kind else LinkedEntity(
            mention=m.text, entity_id=m.vocab_id or f"NEW:{m.type}:{normalize_name(name)}", name=name, kind=kind,
            distance=hit[0].distance if hit else 1.0, linked=False)))
    return out


def from_passages(missing: OpenTriple, question_id: str, question: str, backbone: str, data: DataPaths,
                  params: KarmaParams) -> list[Completion]:
    """Relation extraction (the local classifier) between the known entity and every other mention of the top
    BM25 passages for the question + the open triple."""
    from karma_dagster.backbones.local.relations import LocalRelationModel

    schema = services.kg_schema()
    model = services.cached(("cogmg_relations", str(data.cache())), lambda: LocalRelationModel(data.cache() / "relations"))
    known_name = missing.head if missing.known_end == "head" else missing.tail
    query = f"{question} {missing.head} {missing.relation} {missing.tail}".replace("?", " ")
    out: list[Completion] = []
    for passage in passage_index(data, backbone).search(query, RE_PASSAGES):
        linked = _passage_entities(passage.text, data, backbone, params.rho)
        known = [m for m, e in linked if e is not None and (e.entity_id == missing.known_id
                                                            or normalize_name(m.text) == normalize_name(known_name))]
        others = [(m, e) for m, e in linked if e is not None and e.entity_id != missing.known_id
                  and (not missing.answer_kinds or e.kind in missing.answer_kinds)]
        pairs = [(k, m) for k in known for m, _e in others]
        if not pairs:
            continue
        probs = model.probabilities(passage.text, pairs)
        known_kind = missing.known_kind
        for (k, m), p in zip(pairs, probs):
            entity = next(e for mm, e in others if mm is m)
            for label, prob in p.items():
                if prob < RE_MIN_PROBABILITY:
                    continue
                mapped = schema.map_label(label, known_kind or entity.kind, entity.kind)
                if not mapped or mapped[0].relation != missing.relation:
                    continue
                me, swapped = mapped
                known_is_head = not swapped  # map_label(kind_known, kind_other): swapped -> known is the target
                if (missing.known_end == "head") != known_is_head and me.source != me.target:
                    continue
                h_id, h_name, h_kind, t_id, t_name, t_kind = (
                    (missing.known_id, known_name, known_kind, entity.entity_id, entity.name, entity.kind)
                    if missing.known_end == "head" else
                    (entity.entity_id, entity.name, entity.kind, missing.known_id, known_name, known_kind))
                sentence = passage.text[max(0, min(k.start, m.start) - 120): max(k.end, m.end) + 120]
                out.append(Completion(
                    question_id=question_id, question=question, backbone=backbone, head_id=h_id, head_name=h_name,
                    relation=missing.relation, tail_id=t_id, tail_name=t_name, head_kind=h_kind, tail_kind=t_kind,
                    method="passage_re", passages=[], supported=False, score=0.0,
                    evidence_doc_keys=[passage.doc_key], evidence=sentence, fill_score=round(prob, 4)))
    return out


def from_llm(missing: list[OpenTriple], question_id: str, question: str, backbone: str, data: DataPaths,
             llm_backbone: Any, params: KarmaParams) -> list[Completion]:
    out = []
    for fill in llm.complete(question, missing, llm_backbone):
        m = missing[fill.triple]
        kind = fill.answer_kind if fill.answer_kind in services.kg_schema().node_kinds else (m.answer_kinds or [""])[0]
        entity = llm.link_name(fill.answer, kind, data, backbone, params.rho)
        known_name = m.head if m.known_end == "head" else m.tail
        known = (m.known_id, known_name, m.known_kind)
        other = (entity.entity_id, entity.name, entity.kind)
        (h_id, h_name, h_kind), (t_id, t_name, t_kind) = (known, other) if m.known_end == "head" else (other, known)
        out.append(Completion(
            question_id=question_id, question=question, backbone=backbone, head_id=h_id, head_name=h_name,
            relation=m.relation, tail_id=t_id, tail_name=t_name, head_kind=h_kind, tail_kind=t_kind, method="llm",
            passages=[], supported=False, score=0.0, evidence_doc_keys=[],
            evidence=f"{llm.prompt_id(llm_backbone, llm.COMPLETE)}: {fill.answer}"))
    return out


def dedupe(completions: list[Completion]) -> list[Completion]:
    """One completion per triple: the first method's (candidate before passage RE), its best fill score. Between two
    entities of one kind (Gene-Gene) the two orders are one fill: the plan asked both directions, and neither the
    classifier's labels nor a candidate's alignment says which end acts on the other."""
    best: dict[tuple, Completion] = {}
    for c in completions:
        key = ((c.relation, frozenset((c.head_id, c.tail_id))) if c.head_kind and c.head_kind == c.tail_kind
               else (c.head_id, c.relation, c.tail_id))
        if key not in best:
            best[key] = c
        elif c.method == best[key].method and c.fill_score > best[key].fill_score:
            best[key] = c
    return list(best.values())
