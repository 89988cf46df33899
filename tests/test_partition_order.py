"""Documents' places in the partition order, read for those documents only (partitioning/order.py), agree with
Dagster's own listing on its real SQLite and Postgres instance storages: what a range run over them would hold."""

from __future__ import annotations

import random
from collections.abc import Iterator

import dagster as dg
import pytest

from karma_dagster.partitioning.definitions import DOCUMENTS, KG_DATES, ensure_partitions
from karma_dagster.partitioning.order import CHUNK, keys_between, positions
from karma_dagster.runner import adjacent_batches
from pg_server import PostgresServer


@pytest.fixture(params=["sqlite", "postgres"])
def instance(request: pytest.FixtureRequest, tmp_path) -> Iterator[dg.DagsterInstance]:
    if request.param == "sqlite":
        with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
            yield inst
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    url = server.new_database("partition_order")
    with dg.instance_for_test(overrides={"storage": {"postgres": {"postgres_url": url}}}) as inst:
        yield inst


def _registered(inst: dg.DagsterInstance) -> list[str]:
    """Documents registered in batches as a sensor does, with KG dates between them (the same table), one batch
    late and out of date order, and two documents deleted (holes in the ids)."""
    keys = [f"2020-03-{d:02d}_p{i:03d}" for d in range(1, 11) for i in range(40)]
    for lo in range(0, 300, 60):
        inst.add_dynamic_partitions(DOCUMENTS, keys[lo:lo + 60])
        inst.add_dynamic_partitions(KG_DATES, [f"2020-03-{lo // 60 + 1:02d}"])
    inst.add_dynamic_partitions(DOCUMENTS, ["2019-01-01_late1", "2019-01-01_late2"])
    inst.add_dynamic_partitions(DOCUMENTS, keys[300:])
    for gone in (keys[100], keys[350]):
        inst.delete_dynamic_partition(DOCUMENTS, gone)
    return list(inst.get_dynamic_partitions(DOCUMENTS))


def test_positions_say_exactly_which_documents_can_share_a_range(instance: dg.DagsterInstance) -> None:
    listing = _registered(instance)
    rng = random.Random(7)
    for asked in (listing, rng.sample(listing, 150), listing[55:130], [*listing[280:320], "2020-03-01_p100"]):
        got = positions(instance, DOCUMENTS, asked)
        assert set(got) == set(asked) & set(listing)  # an unregistered key has no place
        ordered = sorted(got, key=got.__getitem__)
        assert ordered == [k for k in listing if k in got]  # the instance's order
        for a, b in zip(ordered, ordered[1:]):
            adjacent = listing.index(b) == listing.index(a) + 1
            assert (got[b] - got[a] == 1) == adjacent, (a, b)


def test_a_range_holds_what_the_listing_holds_between_its_ends(instance: dg.DagsterInstance) -> None:
    listing = _registered(instance)
    for first, last in ((listing[0], listing[-1]), (listing[290], listing[305]), (listing[7], listing[7])):
        assert keys_between(instance, DOCUMENTS, first, last) == listing[listing.index(first):listing.index(last) + 1]
    assert keys_between(instance, DOCUMENTS, listing[3], "2020-03-01_p100") == []  # deleted: no such range


def test_batches_and_registration_ask_only_about_their_documents(instance: dg.DagsterInstance) -> None:
    listing = _registered(instance)
    wanted = listing[:CHUNK + 20]  # over one query's worth of keys
    batches = adjacent_batches(instance, list(reversed(wanted)), per_run=50)
    assert [k for b in batches for k in b] == wanted
    for batch in batches:  # each batch is exactly the range its ends name
        assert len(batch) <= 50
        assert keys_between(instance, DOCUMENTS, batch[0], batch[-1]) == batch
    assert ensure_partitions(instance, DOCUMENTS, [listing[0], "2021-01-01_new", "2021-01-01_new"]) == ["2021-01-01_new"]
    assert ensure_partitions(instance, DOCUMENTS, []) == []
    assert list(instance.get_dynamic_partitions(DOCUMENTS)) == [*listing, "2021-01-01_new"]
