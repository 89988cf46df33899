"""REA: candidate pairs -> p(r | e_i, e_j, summary) from the backbone -> triples with p >= theta_r (multi-label).

Two kinds of candidates, by what the backbone offers:
- document level (a backbone with `document_relation_probabilities`, the local one): every pair of entities of
  a summary, asked once with all their mentions (BioRED and BC5CDR annotate relations per abstract, and most
  related pairs never share a sentence). A document's title and abstract summaries are asked as one text, in
  segment order (FRONT_MATTER): the model learnt whole abstracts with their titles, and the reader cuts a title
  and a long abstract into segments; asked apart, a pair across them was never asked (issue 32: the chain
  scored 0.342 REA pairs on BioRED dev where the whole abstract scores 0.350). Body sections stay one text each. The triple's mentions and evidence are the pair's best co-mention:
  the closest two mentions, fewest sentences apart; the evidence is their sentence (or the sentences from one
  to the other);
- mention level (the LLM backbones): two mentions of different entities in one sentence, the sentence as
  evidence.
One fact per document: the same (head, relation, tail) seen in several places keeps its most probable reading,
and a pair gets at most one of two opposite readings (OPPOSITE_LABELS): BioRED annotates one type per pair, so a
paper's "raises" and "lowers" of one pair are the model's close call, not a contradiction in the literature for
the CRA to send to review (issue 32: on BC5CDR train 420 of 424 conflicts were such same-paper pairs, and on BC5CDR
dev the chain scored 0.007 below its no-conflict-resolution ablation). The better supported stays: on the training
splits it scores as well as keeping both, a raised-first rule or any margin between them
(docs/local-backbone.md, "The whole chain on the dev splits").
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from karma_dagster.backbones.base import Backbone, backbone_map
from karma_dagster.runtime.params import KarmaParams
from karma_dagster.schemas.records import MentionRow, MentionSpan, SegmentRow, SummaryRow, TripleRow

try:  # the shared sentence splitter (helper A2's); the fallback keeps this module usable on its own
    from karma_dagster.dictionary.sentence_memo import split_sentences
except ImportError:  # pragma: no cover - only when dictionary/sentences.py is absent
    import re

    def split_sentences(text: str) -> list[tuple[int, int, str]]:
        out, start = [], 0
        for m in re.finditer(r"(?<=[.!?])\s+(?=[A-Z0-9(])", text):
            out.append((start, m.start(), text[start:m.start()]))
            start = m.end()
        if start < len(text.rstrip()):
            out.append((start, len(text.rstrip()), text[start:len(text.rstrip())]))
        return [s for s in out if s[2].strip()]


class RelationInputError(ValueError):
    """Mentions that do not fit their summaries (unknown summary, span outside or not matching the text)."""


# the labels that read one pair in opposite directions (each maps to a pair of `incompatible` metaedges in
# kg/schema.yaml: treats / causes, palliates / causes, downregulates / upregulates)
OPPOSITE_LABELS: tuple[frozenset[str], ...] = (frozenset({"Positive_Correlation", "Negative_Correlation"}),)


def _hash(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]


def _span(m: MentionRow) -> MentionSpan:
    return MentionSpan(start=m.start, end=m.end, text=m.text, type=m.type, long_form=m.long_form,
                       vocab_id=m.vocab_id)


FRONT_MATTER = frozenset({"title", "abstract"})
_JOIN = "\n\n"  # a paragraph break: a sentence boundary to the splitter, whatever the title's last character


def _front_matter_views(summaries: list[SummaryRow], grouped: dict[str, list[MentionRow]]
                        ) -> tuple[dict[str, SummaryRow], dict[str, list[MentionRow]], dict[str, tuple[str, str]]]:
    """Each document's title and abstract summaries joined into one summary (id `<doc_key>:front`, its mentions
    shifted onto the joined text); every other summary as it is. Returns the summaries and mentions to ask by
    id, and where each moved mention came from (mention id -> (summary id, segment id))."""
    views: dict[str, SummaryRow] = {}
    moved: dict[str, list[MentionRow]] = {}
    origin: dict[str, tuple[str, str]] = {}
    front: dict[str, list[SummaryRow]] = defaultdict(list)
    for s in summaries:
        (front[s.doc_key].append(s) if s.section in FRONT_MATTER else views.__setitem__(s.summary_id, s))
    for doc_key, parts in front.items():
        parts.sort(key=lambda s: s.segment_id)  # `<doc_key>:sNNN`: the reader's order
        if len(parts) == 1:
            views[parts[0].summary_id] = parts[0]
            continue
        vid, offset, texts = f"{doc_key}:front", 0, []
        for s in parts:
            for m in grouped.get(s.summary_id, []):
                moved.setdefault(vid, []).append(m.model_copy(update={
                    "start": m.start + offset, "end": m.end + offset, "summary_id": vid}))
                origin[m.mention_id] = (s.summary_id, s.segment_id)
            texts.append(s.text)
            offset += len(s.text) + len(_JOIN)
        views[vid] = parts[0].model_copy(update={"summary_id": vid, "text": _JOIN.join(texts)})
    mentions = {sid: list(ms) for sid, ms in grouped.items() if sid in views}
    mentions.update(moved)
    return views, mentions, origin


def _segment_views(summaries: list[SummaryRow], grouped: dict[str, list[MentionRow]], segments: list[SegmentRow]
                   ) -> tuple[list[SummaryRow], dict[str, list[MentionRow]]]:
    """Each extractive summary replaced by its whole segment, its mentions moved onto the segment's text: the
    summary is the filter (which entities are asked), the segment the text read (the sentences between them, as
    the model learnt whole abstracts; issue 32). A summary whose sentences are not found in order in its segment
    (an LLM's abstractive summary) stays as it is."""
    texts = {g.segment_id: g.text for g in segments}
    out: list[SummaryRow] = []
    moved: dict[str, list[MentionRow]] = {}
    for s in summaries:
        seg, ms = texts.get(s.segment_id), grouped.get(s.summary_id, [])
        shift = _summary_in_segment(s.text, seg) if seg is not None else None
        on_segment = None if shift is None else [
            m.model_copy(update={"start": shift(m.start), "end": shift(m.end - 1) + 1}) for m in ms]
        if on_segment is None or any(seg[m.start:m.end] != m.text for m in on_segment):
            # abstractive, or a mention across two of the summary's sentences (joined by a space the segment
            # lacks): read the summary itself
            out.append(s)
            moved[s.summary_id] = ms
            continue
        out.append(s.model_copy(update={"text": seg}))
        moved[s.summary_id] = on_segment
    return out, moved


def _summary_in_segment(summary: str, segment: str):
    """A function from a summary offset to the segment's, when the summary's sentences (joined by one space)
    appear in the segment in order; else None."""
    if summary == segment:
        return lambda i: i
    pieces: list[tuple[int, int]] = []  # (summary start, segment start) per sentence
    at, pos = 0, 0
    for _start, _end, sentence in split_sentences(summary):
        found = segment.find(sentence, pos)
        k = summary.find(sentence, at)
        if found < 0 or k < 0:
            return None
        pieces.append((k, found))
        at, pos = k + len(sentence), found + len(sentence)
    if not pieces:
        return None

    def shift(i: int) -> int:
        k, found = max((p for p in pieces if p[0] <= i), default=pieces[0])
        return found + (i - k)
    return shift


def _name(m: MentionRow) -> str:
    return m.kg_name or m.long_form or m.text


def candidate_pairs(summary: SummaryRow, mentions: list[MentionRow]) -> list[tuple[MentionRow, MentionRow, str]]:
    """(earlier mention, later mention, sentence) for mentions of different entities sharing a sentence."""
    text = summary.text
    _check_spans(summary, mentions)
    by_sentence: dict[int, list[MentionRow]] = defaultdict(list)
    sents = split_sentences(text)
    for m in sorted(mentions, key=lambda m: (m.start, m.end)):
        for i, (s, e, _) in enumerate(sents):
            if s <= m.start < e:
                by_sentence[i].append(m)
                break
    out = []
    for i, ms in sorted(by_sentence.items()):
        sentence = sents[i][2]
        for a in range(len(ms)):
            for b in range(a + 1, len(ms)):
                if ms[a].entity_id != ms[b].entity_id:
                    out.append((ms[a], ms[b], sentence))
    return out


def _sentence_of(sents: list[tuple[int, int, str]], pos: int) -> int:
    for i, (s, e, _) in enumerate(sents):
        if s <= pos < e:
            return i
    for i, (s, _e, _) in enumerate(sents):  # in the whitespace between two sentences: the next one
        if pos < s:
            return i
    return max(0, len(sents) - 1)


def entity_candidates(summary: SummaryRow, mentions: list[MentionRow]
                      ) -> tuple[list[list[MentionRow]], list[tuple[int, int]], list[tuple[MentionRow, MentionRow, str]]]:
    """The summary's entities (mentions grouped by entity_id, in order of first mention), every pair of them,
    and per pair its best co-mention (earlier mention, later mention, evidence text)."""
    text = summary.text
    _check_spans(summary, mentions)
    sents = split_sentences(text) or [(0, len(text), text)]
    groups: dict[str, list[MentionRow]] = {}
    for m in sorted(mentions, key=lambda m: (m.start, m.end)):
        groups.setdefault(m.entity_id, []).append(m)
    entities = list(groups.values())
    where = {m.mention_id: _sentence_of(sents, m.start) for m in mentions}
    pairs: list[tuple[int, int]] = []
    best: list[tuple[MentionRow, MentionRow, str]] = []
    for i in range(len(entities)):
        for j in range(i + 1, len(entities)):
            a, b = min(((x, y) for x in entities[i] for y in entities[j]),
                       key=lambda xy: (abs(where[xy[0].mention_id] - where[xy[1].mention_id]),
                                       max(xy[0].start, xy[1].start) - min(xy[0].end, xy[1].end)))
            h, t = (a, b) if (a.start, a.end) <= (b.start, b.end) else (b, a)
            lo, hi = where[h.mention_id], where[t.mention_id]
            evidence = text[sents[lo][0]:sents[hi][1]] if hi - lo <= 1 else f"{sents[lo][2]} [...] {sents[hi][2]}"
            pairs.append((i, j))
            best.append((h, t, evidence))
    return entities, pairs, best


def _check_spans(summary: SummaryRow, mentions: list[MentionRow]) -> None:
    text = summary.text
    for m in mentions:
        if not (0 <= m.start < m.end <= len(text)) or text[m.start:m.end] != m.text:
            raise RelationInputError(
                f"mention {m.mention_id} ({m.text!r} at {m.start}-{m.end}) does not match summary "
                f"{summary.summary_id} (text there: {text[m.start:m.end]!r})"
            )


class SampleAgreement(NamedTuple):
    """One relation of one pair over the N samples: MedKGent's sampling confidence and the model's own p."""

    fraction: float  # samples in which p_r >= theta_r, / N: the triple's sample_confidence
    probability: float  # mean p_r over those samples: the triple's probability


def sample_agreement(samples: list[list[dict[str, float]]], params: KarmaParams) -> list[dict[str, SampleAgreement]]:
    """MedKGent sampling confidence, per pair: the relations proposed (p_r >= theta_r) in at least
    `min_sample_confidence` of the N samples (and in one at least), each with that fraction and its mean p over
    the proposing samples. `samples[k][i]` is sample k's answer for pair i."""
    n = len(samples)
    out: list[dict[str, SampleAgreement]] = []
    for per_pair in zip(*samples, strict=True):
        kept: dict[str, SampleAgreement] = {}
        for r in sorted({r for probs in per_pair for r in probs}):
            hits = [probs[r] for probs in per_pair if probs.get(r, 0.0) >= params.theta_for(r)]
            fraction = len(hits) / n
            if hits and fraction >= params.min_sample_confidence:
                kept[r] = SampleAgreement(fraction, min(1.0, max(0.0, sum(hits) / len(hits))))
        out.append(kept)
    return out


def sampled_probabilities(samples: list[list[dict[str, float]]], params: KarmaParams) -> list[dict[str, float]]:
    """Per pair and relation, the fraction of the N samples in which the relation passed its theta_r; 0 below
    `min_sample_confidence` (dropped)."""
    agreed = sample_agreement(samples, params)
    return [{r: (a[r].fraction if r in a else 0.0) for r in sorted({r for probs in per_pair for r in probs})}
            for a, per_pair in zip(agreed, zip(*samples, strict=True), strict=True)]


def extract_relations(
    summaries: list[SummaryRow],
    mentions: list[MentionRow],
    backbone: Backbone,
    params: KarmaParams,
    *,
    n_samples: int | None = None,
    segments: list[SegmentRow] | None = None,
) -> list[TripleRow]:
    """Triples of every summary, deduplicated per document on (unordered pair, relation).

    BioRED's relation types are undirected, so (A, r, B) and (B, r, A) are one fact; its head is the mention
    read first. `n_samples` (default `params.relation_samples`, 5) > 1 is MedKGent's sampling confidence: N
    answers at `params.sampling_temperature` (each backbone makes its samples differ: an LLM samples at that
    temperature under a per-sample cache key, the local classifier adds seeded logit noise), a triple kept when
    the fraction of samples proposing it (p_r >= theta_r) is >= `min_sample_confidence`; that fraction is its
    `sample_confidence` (the evidence score the KG's reinforcement aggregates) and the mean p_r of those samples
    its `probability`. N = 1: the single answer thresholded at theta_r, `sample_confidence` None.
    `segments` (the reader's): a document-level backbone reads each summary's whole segment, asking the pairs of
    the entities the summary kept.
    All summaries' (and samples') calls overlap up to the backbone's limit.
    """
    n = params.relation_samples if n_samples is None else n_samples
    if n < 1:
        raise ValueError(f"extract_relations: n_samples must be >= 1, got {n}")
    by_id = {s.summary_id: s for s in summaries}
    grouped: dict[str, list[MentionRow]] = defaultdict(list)
    for m in mentions:
        if m.summary_id not in by_id:
            raise RelationInputError(f"mention {m.mention_id} refers to unknown summary {m.summary_id!r}")
        grouped[m.summary_id].append(m)

    document_level = callable(getattr(backbone, "document_relation_probabilities", None))
    origin: dict[str, tuple[str, str]] = {}
    if document_level:
        for sid, ms in grouped.items():  # on the summaries they came with: the error names the right one
            _check_spans(by_id[sid], ms)
        if segments:
            summaries, grouped = _segment_views(summaries, grouped, segments)
        by_id, grouped, origin = _front_matter_views(summaries, grouped)
    work: list[tuple[str, list[tuple[MentionRow, MentionRow, str]]]] = []
    entity_work: list[tuple[list[list[MentionSpan]], list[tuple[int, int]]]] = []
    for sid, ms in grouped.items():
        if document_level:
            entities, index_pairs, pairs = entity_candidates(by_id[sid], ms)
            entity_work.append(([[_span(m) for m in e] for e in entities], index_pairs))
        else:
            pairs = candidate_pairs(by_id[sid], ms)
        if pairs:
            work.append((sid, pairs))
        elif document_level:
            entity_work.pop()
    jobs = [(w, k) for w in range(len(work)) for k in range(n)]

    def ask(job: tuple[int, int]) -> list[dict[str, float]]:
        sid, pairs = work[job[0]]
        if document_level:
            entities, index_pairs = entity_work[job[0]]
            doc_backbone: Any = backbone  # offers the document-level methods (checked above)
            probs = (doc_backbone.document_relation_probabilities(by_id[sid].text, entities, index_pairs) if n == 1
                     else doc_backbone.sample_document_relation_probabilities(
                         by_id[sid].text, entities, index_pairs, job[1], params.sampling_temperature))
        elif n == 1:
            probs = backbone.relation_probabilities(by_id[sid].text, [(_span(h), _span(t)) for h, t, _ in pairs])
        else:
            spans = [(_span(h), _span(t)) for h, t, _ in pairs]
            sampler = getattr(backbone, "sample_relation_probabilities", None)
            probs = (sampler(by_id[sid].text, spans, job[1], params.sampling_temperature) if sampler
                     else backbone.relation_probabilities(by_id[sid].text, spans))  # deterministic: alike
        if len(probs) != len(pairs):
            raise RelationInputError(f"backbone {backbone.name} returned {len(probs)} answers for {len(pairs)} "
                                     f"pairs of summary {sid}")
        return probs

    answers = backbone_map(backbone, ask, jobs)
    best: dict[tuple[str, frozenset[str], str], TripleRow] = {}
    for w, (sid, pairs) in enumerate(work):
        summary = by_id[sid]
        samples = answers[w * n: (w + 1) * n]
        if n == 1:  # the single answer: relations at or over theta_r, no sampling confidence
            proposed = [{r: (p, None) for r, p in p_r.items() if p >= params.theta_for(r)} for p_r in samples[0]]
        else:
            proposed = [{r: (a.probability, a.fraction) for r, a in agreed.items()}
                        for agreed in sample_agreement(samples, params)]
        for (h, t, sentence), p_r in zip(pairs, proposed, strict=True):
            for relation, (p, fraction) in p_r.items():
                key = (summary.doc_key, frozenset((h.entity_id, t.entity_id)), relation)
                if key in best and (best[key].sample_confidence or 0.0, best[key].probability) >= (fraction or 0.0, p):
                    continue  # the document's best reading of this fact: most agreeing samples, then most probable
                home_summary, home_segment = origin.get(h.mention_id, (sid, summary.segment_id))
                best[key] = TripleRow(
                    doc_key=summary.doc_key,
                    triple_id=_hash(summary.doc_key, *sorted((h.entity_id, t.entity_id)), relation),
                    summary_id=home_summary, segment_id=home_segment,
                    head_mention_id=h.mention_id, head_id=h.entity_id, head_name=_name(h), head_type=h.type,
                    relation=relation,
                    tail_mention_id=t.mention_id, tail_id=t.entity_id, tail_name=_name(t), tail_type=t.type,
                    probability=min(1.0, max(0.0, float(p))), evidence=sentence, sample_confidence=fraction,
                )
    return sorted(_one_direction(best.values()), key=lambda r: (r.doc_key, r.summary_id, -r.probability, r.triple_id))


def _one_direction(triples: Iterable[TripleRow]) -> list[TripleRow]:
    """Of a document's opposite readings of one pair, the better supported stays: most agreeing samples, then most
    probable, then the relation's name (a tie must not depend on the order of the answers)."""
    rows = list(triples)
    drop: set[str] = set()
    for labels in OPPOSITE_LABELS:
        by_pair: dict[tuple[str, frozenset[str]], list[TripleRow]] = defaultdict(list)
        for r in rows:
            if r.relation in labels:
                by_pair[(r.doc_key, frozenset((r.head_id, r.tail_id)))].append(r)
        for group in by_pair.values():
            if len({r.relation for r in group}) > 1:
                keep = max(group, key=lambda r: (r.sample_confidence or 0.0, r.probability, r.relation))
                drop.update(r.triple_id for r in group if r.relation != keep.relation)
    return [r for r in rows if r.triple_id not in drop]
