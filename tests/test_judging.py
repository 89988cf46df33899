"""Every accepted triple is judged against gold: ends without a vocabulary id by their spans, what no gold can
judge counted with its reason; ECE and the reliability diagram of the stored confidences."""

from __future__ import annotations

import pandas as pd
import pytest

from karma_dagster.ingest.pubtator import read_pubtator
from karma_dagster.metrics.calibration import expected_calibration_error, reliability_bins, reliability_png
from karma_dagster.metrics.judging import DocumentTriples, judge_documents

BIORED_DOC = """\
1|t|Metformin lowers ALT in fatty liver
1|a|In patients with NAFLD, metformin reduced ALT levels and did not affect weight.
1\t0\t9\tMetformin\tChemicalEntity\tD008687
1\t17\t20\tALT\tGeneOrGeneProduct\t2875
1\t24\t35\tfatty liver\tDiseaseOrPhenotypicFeature\tD005234
1\t53\t58\tNAFLD\tDiseaseOrPhenotypicFeature\tD065626
1\t60\t69\tmetformin\tChemicalEntity\tD008687
1\t78\t81\tALT\tGeneOrGeneProduct\t2875
1\tNegative_Correlation\tD008687\t2875\tNovel
1\tNegative_Correlation\tD008687\tD065626\tNovel
"""

CDR_DOC = """\
2|t|Lithium-induced polyuria in a patient with headache
2|a|Lithium was given.
2\t0\t7\tLithium\tChemical\tD008094
2\t16\t24\tpolyuria\tDisease\tD011141
2\t43\t51\theadache\tDisease\tD006261
2\tCID\tD008094\tD011141
"""


def _doc(tmp_path, text: str):
    path = tmp_path / "gold.pubtator"
    path.write_text(text)
    return read_pubtator(path)[0]


def _mention(mid, eid, start, end, text, typ, vocab=None):
    return {"mention_id": mid, "entity_id": eid, "start": start, "end": end, "text": text, "type": typ,
            "vocab_id": vocab, "kg_id": None, "gold_start": start, "gold_end": end}


def _triple(tid, h, hid, t, tid_, rel, score, htype="Chemical", ttype="Gene", kg_rel=None):
    return {"triple_id": tid, "head_mention_id": h, "head_id": hid, "tail_mention_id": t, "tail_id": tid_,
            "relation": rel, "kg_relation": kg_rel, "head_type": htype, "tail_type": ttype, "probability": score,
            "evidence_score": score}


def test_ends_without_ids_are_judged_by_their_spans_and_non_gold_entities_are_wrong(tmp_path):
    gold = _doc(tmp_path, BIORED_DOC)
    mentions = pd.DataFrame([
        _mention("m1", "e-met", 0, 9, "Metformin", "Chemical", "MESH:D008687"),
        _mention("m2", "new-alt", 17, 20, "ALT", "Gene"),  # no id: judged by the gold mention it covers
        _mention("m3", "new-weight", 108, 114, "weight", "Disease"),  # no id, no gold mention under it
        _mention("m4", "new-nafld", 53, 58, "NAFLD", "Disease"),
    ])
    triples = pd.DataFrame([
        _triple("t1", "m1", "e-met", "m2", "new-alt", "Negative_Correlation", 0.8),
        _triple("t2", "m1", "e-met", "m3", "new-weight", "Negative_Correlation", 0.6, ttype="Disease"),
        _triple("t3", "m1", "e-met", "m4", "new-nafld", "Positive_Correlation", 0.7, ttype="Disease"),
        # the same pair read again under another label: one unit, its best confidence
        _triple("t4", "m1", "e-met", "m2", "new-alt", "Association", 0.9),
    ])
    j = judge_documents([DocumentTriples(doc_key="d1", gold=gold, mentions=mentions, triples=triples)])
    by_pair = {u.pair: u for u in j.units}
    assert by_pair[("2875", "D008687")].right is True and by_pair[("2875", "D008687")].confidence == 0.9
    assert by_pair[("2875", "D008687")].typed_right is True  # one of its readings has the gold type
    wrong = [u for u in j.units if u.right is False]
    assert len(wrong) == 1 and wrong[0].why == "not a gold entity"
    assert by_pair[("D008687", "D065626")].right is True and by_pair[("D008687", "D065626")].typed_right is False
    assert j.unjudged == 0 and len(j.units) == 3
    assert (j.pair.tp, j.pair.fp, j.pair.fn) == (2, 1, 0)
    assert j.one_line().startswith("accepted pairs P/R/F1 0.667/1.000/0.800 | pair+type P/R/F1 0.333/0.500/0.400")
    assert j.one_line().endswith("unjudged 0 of 3")


def test_what_no_gold_can_judge_is_counted_with_its_reason(tmp_path):
    gold = _doc(tmp_path, CDR_DOC)
    mentions = pd.DataFrame([
        _mention("c1", "e-li", 0, 7, "Lithium", "Chemical", "MESH:D008094"),
        _mention("c2", "e-pu", 16, 24, "polyuria", "Disease", "MESH:D011141"),
        _mention("c3", "e-he", 43, 51, "headache", "Disease", "MESH:D006261"),
        _mention("c4", "e-gene", 59, 66, "was giv", "Gene"),  # a type BC5CDR does not annotate
    ])
    triples = pd.DataFrame([
        _triple("a", "c1", "e-li", "c2", "e-pu", "Positive_Correlation", 0.9, ttype="Disease"),  # CID: right
        _triple("b", "c1", "e-li", "c3", "e-he", "Negative_Correlation", 0.5, ttype="Disease",
                kg_rel="treats"),  # CID gold says nothing of "treats" off a CID pair
        _triple("c", "c1", "e-li", "c4", "e-gene", "Association", 0.5),  # a gene: unjudged
        _triple("d", "c1", "e-li", "c3", "e-he", "Positive_Correlation", 0.4, ttype="Disease"),  # not CID: wrong
    ])
    j = judge_documents([DocumentTriples(doc_key="d2", gold=gold, mentions=mentions, triples=triples)])
    assert j.unjudged == 1
    reasons = j.unjudged_reasons()
    assert reasons == {"the corpus does not annotate Gene": 1}
    # the gene unit is outside the gold's scope: still unjudged (no gold says if it is right), counted apart
    assert j.outside_scope == 1
    assert j.scope_line() == ("unjudged 1 of 3: outside the gold's scope 1 (a kind pair, type or relation the corpus "
                              "does not annotate), in its scope but not judged 0")
    assert (j.pair.tp, j.pair.fp) == (1, 1)
    # the headache unit: "treats" could not be judged, "causes" was judged wrong: the judged reading decides
    head = [u for u in j.units if "D006261" in u.pair][0]
    assert head.right is False and head.confidence == 0.5


def test_ece_and_reliability_bins():
    conf = [0.9] * 10 + [0.2] * 10
    right = [True] * 9 + [False] + [False] * 8 + [True] * 2
    assert expected_calibration_error(conf, right) == pytest.approx(0.0)
    assert reliability_bins(conf, right) == [pytest.approx((0.2, 0.2, 10)), pytest.approx((0.9, 0.9, 10))]
    # confident and wrong half the time: ECE 0.4
    assert expected_calibration_error([0.9] * 10, [True] * 5 + [False] * 5) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="not in \\[0, 1\\]"):
        expected_calibration_error([1.2], [True])
    png = reliability_png({"local": (conf, right)})
    assert png.startswith(b"\x89PNG") and len(png) > 5000
