"""The whole chain on the local backbone, in process, on real shipped papers of two dates."""

from __future__ import annotations

import dagster as dg
import duckdb
import pandas as pd
import pytest

from partition_views import BY_DATE, document_metadata, partition_of
from karma_dagster import runner
from karma_dagster.ingest.keys import date_of_document_key

JATS = ("PMC4686705.xml", "PMC4686705.json")  # Snap25 / type 2 diabetes, published 2015-12-08
PDF = ("PMC4738914.pdf", "PMC4738914.json")  # levofloxacin thrombocytopenia case report, 2016-01-14


def kg_tables(path) -> dict[str, pd.DataFrame]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            "evidence": con.execute(
                "SELECT namespace, doc_key, date, triple_id, head_id, relation, tail_id, metaedge, score, segment_id, "
                "evidence, backbone, prompt_version, date_source FROM evidence ORDER BY ALL"
            ).df(),
            "nodes": con.execute("SELECT * FROM nodes ORDER BY ALL").df(),
            "edges": con.execute("SELECT * FROM edges ORDER BY ALL").df(),
        }
    finally:
        con.close()


@pytest.fixture(scope="module")
def grown(make_module_pipeline):
    p = make_module_pipeline(inbox_files=JATS + PDF)
    assert runner.import_kg(p.defs, p.instance)
    before = p.kg.snapshot_counts(namespace="local")
    keys, failed = runner.register_inbox(p.defs, p.instance)
    assert not failed and len(keys) == 2
    assert not runner.run_documents(p.defs, p.instance, keys, log=lambda _m: None)
    dates = sorted({date_of_document_key(k) for k in keys})
    assert all(runner.run_increments(p.defs, p.instance, "local", dates).values())
    return p, keys, dates, before


def test_chain_grows_the_kg_with_provenance_on_two_dates(grown):
    p, keys, dates, before = grown
    assert dates == ["2015-12-08", "2016-01-14"]
    after = p.kg.snapshot_counts(namespace="local")
    assert after.n_evidence > 0 and after.n_extracted_nodes > 0
    assert after.n_nodes > before.n_nodes and after.n_edges > before.n_edges

    ev = kg_tables(p.storage.kg_path())["evidence"]
    assert set(ev["doc_key"]) == set(keys), "both documents contributed accepted triples"
    assert set(ev["date_source"]) == {"publication"}  # each row knows its date is the paper's publication date
    stages = p.storage.stage_store()
    for row in ev.itertuples():
        assert str(row.date)[:10] == date_of_document_key(row.doc_key)
        assert row.backbone == "local" and row.prompt_version and row.segment_id.startswith(row.doc_key)
        doc_text = stages.read("local", "documents", row.doc_key).iloc[0]["text"]
        assert row.evidence.split()[0] in doc_text  # the evidence sentence comes from the paper itself
        assert 0 < row.score <= 1

    # Provenance and dates of the KG as of the first day: only the first paper's triples.
    as_of_first = p.kg.snapshot_counts(namespace="local", as_of=pd.Timestamp(dates[0]).date())
    assert 0 < as_of_first.n_evidence < after.n_evidence

    # A seed edge the Snap25 paper states again is reinforced above its seed confidence.
    edges = kg_tables(p.storage.kg_path())["edges"]
    reinforced = edges[edges["in_seed"] & (edges["n_evidence"] > 0)]
    assert not reinforced.empty and (reinforced["confidence"] > 0.9).all()
    assert {"2015-12-08"} <= {str(d)[:10] for d in reinforced["first_seen"]}


def test_every_stage_materialized_with_metadata_and_passing_checks(grown):
    p, keys, _dates, _ = grown
    for stage in ("documents", "segments", "summaries", "entities", "relations", "aligned", "resolved", "evaluated"):
        key = dg.AssetKey(["local", stage])
        for doc in keys:
            meta = document_metadata(p, key, doc)  # date partitions: the day's, with the document's own figures
            if "documents" in meta:  # a batch run (karma run batches a date's documents), or the day's
                assert meta["documents"] == (len(keys) if not BY_DATE else  # partition: the document's own
                                             sum(partition_of(k) == partition_of(doc) for k in keys))  # metadata
            assert meta["document"] == doc  # is still there to read
            assert {"rows", "backbone", "prompt_id", "llm_calls", "preview"} <= set(meta)
        check = p.instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [dg.AssetCheckKey(key, f"{stage}_table_schema")]
        )
        assert check and next(iter(check.values())).status.value == "SUCCEEDED"


def test_rematerializing_a_partition_leaves_the_kg_unchanged(grown):
    p, keys, dates, _ = grown
    before = kg_tables(p.storage.kg_path())
    assert not runner.run_documents(p.defs, p.instance, keys[:1], log=lambda _m: None)
    assert all(runner.run_increments(p.defs, p.instance, "local", dates).values())
    after = kg_tables(p.storage.kg_path())
    pd.testing.assert_frame_equal(before["evidence"], after["evidence"])
    pd.testing.assert_frame_equal(before["nodes"], after["nodes"])
    pd.testing.assert_frame_equal(before["edges"], after["edges"])


def test_report_counts_what_the_stores_hold(grown):
    p, keys, _dates, before = grown
    report = runner.run_report(p.defs, p.instance, wall_time_s=1.0, failed={})
    (local,) = report.backbones
    after = p.kg.snapshot_counts(namespace="local")
    assert local.documents == 2
    assert local.triples_accepted == after.n_evidence
    assert local.kg_nodes_before == before.n_nodes and local.kg_nodes_after == after.n_nodes
    assert local.mentions == local.mentions_linked + local.mentions_new > 0
    assert local.segments_dropped > 0, "the JATS paper's references are dropped"
    assert "| triples accepted |" in report.markdown()
    # what the confidence it stores is: the local backbone's calibrated probability
    assert report.calibration == {"local": "calibrated (shipped learned evaluator)"}
    assert "Confidence: local calibrated (shipped learned evaluator)" in report.markdown()
    assert "uncalibrated" not in report.markdown()


def test_documents_validated_together_collect_exactly_as_each_alone(grown, monkeypatch: pytest.MonkeyPatch):
    """The KG increment and the merge state validate a date's evaluated tables in one pandera pass (its cost is per
    column and call); the result is each document's own, and a table that fails is still named alone."""
    from karma_dagster.agents.integration import StageTableInvalid, collect_document, collect_documents
    from karma_dagster.schemas.tables import EvaluatedTable

    p, keys, _, _ = grown
    stages = p.storage.stage_store()
    tables = {k: (stages.read("local", "evaluated", k), stages.read("local", "entities", k)) for k in keys}
    assert all(len(ev) for ev, _ in tables.values()), "a document with no triple: nothing compared"
    alone = {k: collect_document(k, ev, en, "v1") for k, (ev, en) in tables.items()}
    calls: list[int] = []
    real = EvaluatedTable.validate.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(EvaluatedTable, "validate", classmethod(lambda cls, df, **kw: calls.append(len(df)) or real(cls, df, **kw)))
    assert collect_documents(tables, "v1") == alone
    assert calls == [sum(len(ev) for ev, _ in tables.values())], "one pass over both documents' rows"

    # a table out of range: that document is named, the other collected as alone
    (k1, (ev1, en1)), (k2, (ev2, en2)) = tables.items()
    bad = ev2.copy()
    bad.loc[bad.index[0], "evidence_score"] = 1.5
    calls.clear()
    got = collect_documents({k1: (ev1, en1), k2: (bad, en2)}, "v1")
    assert got[k1] == alone[k1] and isinstance(got[k2], StageTableInvalid) and k2 in str(got[k2])
    assert "less_than_or_equal_to(1.0)" in str(got[k2]) and len(calls) == 3  # together, then each alone
    # the same table under two names: together their triple ids repeat (unique fails), each alone is valid
    calls.clear()
    assert collect_documents({k1: (ev1, en1), "copy": (ev1, en1)}, "v1") == {k1: alone[k1], "copy": alone[k1]}
    assert len(calls) == 3
    # other dtypes (a float column read as object): never one pass, each judged as it is
    calls.clear()
    odd = ev2.astype({"probability": object})
    got = collect_documents({k1: (ev1, en1), k2: (odd, en2)}, "v1")
    assert got[k1] == alone[k1] and isinstance(got[k2], StageTableInvalid) and len(calls) == 2
