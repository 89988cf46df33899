"""The learned evaluator's features of one triple: what the chain knows, as named numbers.

Named (a dict, not a matrix) so the shipped model's coefficients read as "negation between the pair: -1.3",
and a feature the model was not trained with is simply absent (0). Cues are read in the words *between* the pair's
two mentions of the evidence sentence (and a few before the first), where they govern the pair, and in the
whole sentence, where they may not.
"""

from __future__ import annotations

import math
import re

from karma_dagster.dictionary import cues
from karma_dagster.schemas.triple_context import EndFacts, TripleContext

FEATURES_VERSION = "triple-features-v1"
POSITIVE = frozenset({"Positive_Correlation", "upregulates", "causes", "Drug_Interaction"})
NEGATIVE = frozenset({"Negative_Correlation", "downregulates", "treats", "palliates"})
SECTIONS = {"title": "title", "abstract": "abstract", "results": "results", "conclusion": "conclusion",
            "discussion": "discussion", "methods": "methods", "introduction": "background",
            "background": "background", "case": "results"}
_WORD = re.compile(r"\w+")


def _find(name: str, text: str) -> tuple[int, int] | None:
    """The first place `name` stands in `text` as a whole word (case-insensitive), else None."""
    if not name:
        return None
    m = re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, re.IGNORECASE)
    return (m.start(), m.end()) if m else None


def pair_windows(ctx: TripleContext) -> tuple[str, str, bool]:
    """(words between the two mentions, up to 6 words before the first, whether both were found)."""
    ev = ctx.evidence
    h, t = _find(ctx.head.text, ev), _find(ctx.tail.text, ev)
    if h is None or t is None:
        return ev, "", False
    first, second = sorted((h, t))
    between = ev[first[1]: second[0]] if second[0] > first[1] else ""
    before = " ".join(_WORD.findall(ev[: first[0]])[-6:])
    return between, before, True


def chemical_caused(ctx: TripleContext, between: str, before: str) -> bool:
    """A chemical named as the cause of the disease: "X-induced Y", "Y induced by X", "Y after X"."""
    kinds = {ctx.head.type, ctx.tail.type}
    if kinds != {"Chemical", "Disease"}:
        return False
    chem = ctx.head if ctx.head.type == "Chemical" else ctx.tail
    ev = ctx.evidence
    at = _find(chem.text, ev)
    attached = at is not None and bool(re.match(r"\s*-?\s*(?:induc|associat|relat|caus)\w*", ev[at[1]: at[1] + 16],
                                                re.IGNORECASE))
    return attached or bool(cues.CAUSE_RE.search(between))


def negated_pair(between: str, before: str) -> bool:
    """A negation that governs the pair: between its mentions, or just before the first ("no X ... Y")."""
    return bool(cues.SCOPED_NEGATION_RE.search(between)) or bool(re.search(r"\b(?:no|not|neither|without)\b",
                                                                            before, re.IGNORECASE))


def contrasted_pair(between: str) -> bool:
    return bool(re.search(r"\bbut\s+not\b|\bwhereas\b|\bunlike\b|\brather\s+than\b|\binstead\s+of\b", between,
                          re.IGNORECASE))


def _end(prefix: str, e: EndFacts) -> dict[str, float]:
    return {f"{prefix}_vocab": float(e.has_vocab_id), f"{prefix}_linked": float(e.status == "linked"),
            f"{prefix}_seed": float(e.linked_to == "seed"), f"{prefix}_learned_only": float(not e.in_dictionary),
            f"{prefix}_new_no_id": float(e.status != "linked" and not e.has_vocab_id),
            f"{prefix}_distance": min(1.0, e.distance), f"{prefix}_log_mentions": math.log1p(e.n_mentions)}


def features(ctx: TripleContext) -> dict[str, float]:
    p = min(max(ctx.probability, 1e-4), 1 - 1e-4)
    between, before, located = pair_windows(ctx)
    sentence = ctx.evidence
    n_between = len(_WORD.findall(between)) if located else 0
    relation = ctx.kg_relation or ctx.relation
    positive = ctx.relation in POSITIVE or relation in POSITIVE
    negative = ctx.relation in NEGATIVE or relation in NEGATIVE
    up, down = bool(cues.UP_RE.search(between)), bool(cues.DOWN_RE.search(between))
    caused = chemical_caused(ctx, between, before)
    types = "|".join(sorted((ctx.head.type, ctx.tail.type)))
    f: dict[str, float] = {
        "logit_p": math.log(p / (1 - p)),
        "sample_confidence": ctx.sample_confidence if ctx.sample_confidence is not None else 1.0,
        "alignment_prob": ctx.alignment_prob,
        f"label={ctx.relation}": 1.0,
        f"relation={relation}": 1.0,
        f"types={types}": 1.0,
        "pair_located": float(located),
        "log_between_words": math.log1p(n_between),
        "sentence_long": max(0.0, len(_WORD.findall(sentence)) - 30) / 30.0,
        "negation_pair": float(located and negated_pair(between, before)),
        "negation_sentence": float(bool(cues.SCOPED_NEGATION_RE.search(sentence))),
        "contrast_pair": float(located and contrasted_pair(between)),
        "contrast_sentence": float(bool(cues.CONTRAST_RE.search(sentence))),
        "hedge_sentence": float(bool(cues.HEDGE_RE.search(sentence))),
        "study_sentence": float(bool(cues.STUDY_RE.search(sentence))),
        "comparison_pair": float(bool(cues.COMPARISON_RE.search(between))),
        "listing_pair": math.log1p(cues.count(cues.LISTING_RE, between)),
        "cue_between": float(bool(cues.RELATION_CUE_RE.search(between))),
        "cue_sentence": float(bool(cues.RELATION_CUE_RE.search(sentence))),
        "chemical_caused": float(caused),
        "caused_but_negative": float(caused and negative),
        "treat_between": float(bool(cues.TREAT_RE.search(between))),
        "treat_but_positive": float(bool(cues.TREAT_RE.search(between)) and positive and types == "Chemical|Disease"),
        "polarity_clash": float((positive and down and not up) or (negative and up and not down)),
        f"section={SECTIONS.get(ctx.section, 'other')}": 1.0,
        "segment_relevance": ctx.segment_relevance,
        "conflict": float(ctx.conflict),
        "log_doc_entities": math.log1p(ctx.n_doc_entities),
        "both_vocab": float(ctx.head.has_vocab_id and ctx.tail.has_vocab_id),
    }
    f.update(_end("head", ctx.head))
    f.update(_end("tail", ctx.tail))
    # symmetric summaries (which end is the head is the schema's orientation, not the evidence's)
    f["ends_new_no_id"] = f["head_new_no_id"] + f["tail_new_no_id"]
    f["ends_learned_only"] = f["head_learned_only"] + f["tail_learned_only"]
    return f


def blocked(ctx: TripleContext) -> str | None:
    """Why this co-mention must not enter the KG whatever its probability, or None.

    Precision rules, not learned: a negated or contrasted pair never yields a relation ("did not affect COX-2",
    "X but not Y"), and a chemical the sentence names as the disease's cause never treats or palliates it.
    """
    between, before, located = pair_windows(ctx)
    if located and negated_pair(between, before):
        return "negated co-mention (a negation between or just before the pair)"
    if located and contrasted_pair(between):
        return "contrasted co-mention ('but not', 'whereas', 'unlike' between the pair)"
    if (ctx.kg_relation in ("treats", "palliates") and located
            and chemical_caused(ctx, between, before)):
        return "the sentence names the chemical as the disease's cause, not its treatment"
    return None
