"""Files the product creates are never written through a symbolic link someone else planted.

Each test plants a link where the product is about to create a file or a folder (a starter file's folder, the
temporary name `karma init` writes first, a feed folder in the inbox, a report file, the LLM server's log in the
shared temporary folder, the copy an import keeps aside) pointing at a file or folder that stands for someone
else's, and checks that nothing reached it.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from karma_dagster.ingest.feed.settings import FeedSettings
from karma_dagster.ingest.feed.writer import query_folder, write_pubmed_day
from karma_dagster.project.starter import InitError, init_project

VICTIM_TEXT = "someone else's file\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file and a folder outside the product's folders, standing for another user's."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text(VICTIM_TEXT, encoding="utf-8")
    return elsewhere


def _untouched(victim: Path) -> None:
    assert sorted(p.name for p in victim.iterdir()) == ["precious.txt"]
    assert (victim / "precious.txt").read_text(encoding="utf-8") == VICTIM_TEXT


def test_karma_init_refuses_a_planted_folder_link_and_writes_nothing(tmp_path: Path, victim: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "inbox").symlink_to(victim, target_is_directory=True)
    with pytest.raises(InitError, match=r"inbox: a symbolic link stands where `karma init` makes a folder"):
        init_project(project)
    _untouched(victim)
    assert sorted(p.name for p in project.iterdir()) == ["inbox"]  # nothing written


def test_karma_init_never_writes_through_a_link_at_its_temporary_name(tmp_path: Path, victim: Path) -> None:
    """The temporary file a starter file is written to first has a name nobody can guess in advance."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("karma.yaml", "backbones.yaml", "workspace.yaml", ".gitignore", ".env.example"):
        (project / f".{name}.karma-init-{os.getpid()}").symlink_to(victim / "precious.txt")
    done = init_project(project)
    assert "karma.yaml" in done.written
    _untouched(victim)
    assert not (project / "karma.yaml").is_symlink() and "karma_project" in (project / "karma.yaml").read_text()


def test_the_feed_never_writes_into_a_planted_folder_link_in_the_inbox(tmp_path: Path, victim: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "feed").symlink_to(victim, target_is_directory=True)
    feed = FeedSettings(query="asthma", source="pubmed", email="t@example.org").resolved()
    with pytest.raises(FileExistsError, match="a symbolic link stands where a folder was to be created"):
        write_pubmed_day(inbox, feed, dt.date(2026, 1, 2), b"<PubmedArticleSet/>")
    _untouched(victim)


def test_a_feed_file_link_is_replaced_never_written_through(tmp_path: Path, victim: Path) -> None:
    inbox = tmp_path / "inbox"
    feed = FeedSettings(query="asthma", source="pubmed", email="t@example.org").resolved()
    folder = query_folder(inbox, feed)
    folder.mkdir(parents=True)
    (folder / "2026-01-02.xml").symlink_to(victim / "precious.txt")
    written = write_pubmed_day(inbox, feed, dt.date(2026, 1, 2), b"<PubmedArticleSet/>")
    assert written.status == "new"  # a link is not a file the feed wrote
    _untouched(victim)
    assert not (folder / "2026-01-02.xml").is_symlink()
    assert (folder / "2026-01-02.xml").read_bytes() == b"<PubmedArticleSet/>"


def test_a_report_file_link_is_replaced_never_written_through(tmp_path: Path, victim: Path) -> None:
    from karma_dagster.metrics.comparison import ComparisonRow, chart

    png = tmp_path / "metrics" / "backbone_comparison.png"
    png.parent.mkdir()
    png.symlink_to(victim / "precious.txt")
    chart([ComparisonRow(backbone="local", values={"coverage": 0.5})], png)
    _untouched(victim)
    assert not png.is_symlink() and png.read_bytes()[:4] == b"\x89PNG"


def test_the_llm_server_log_in_the_shared_temp_folder_is_never_followed(tmp_path: Path, victim: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The local server's log has a predictable name in the temporary folder: a link planted there is removed,
    not written through (the server command here is `true`: only the log's opening matters)."""
    from karma_dagster.backbones.llm import local_server

    log = tmp_path / "karma-llm-server-8088.log"
    log.symlink_to(victim / "precious.txt")
    monkeypatch.setattr(local_server, "resolve_model", lambda model: tmp_path / "model.gguf")
    server = local_server.LocalLLMServer(local_server.ServerSettings(port=0, start_timeout=10), log_path=log)
    monkeypatch.setattr(local_server, "runtime_missing", lambda: "")
    monkeypatch.setattr(server, "command", lambda: ["true"])
    with pytest.raises(local_server.LLMServerError):
        server.start()  # `true` exits at once: "the server stopped" (its empty log shown)
    _untouched(victim)
    assert not log.is_symlink()


def test_the_copy_an_import_keeps_aside_is_never_written_through_a_link(tmp_path: Path, victim: Path) -> None:
    from karma_dagster.kg.seed_guard import keep_aside
    from karma_dagster.kg.store import KGStore

    store = KGStore(tmp_path / "kg.duckdb")
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    planted = tmp_path / f"kg.duckdb.before-import-{now.strftime('%Y%m%dT%H%M%S%fZ')}"
    planted.symlink_to(victim / "precious.txt")
    with store.connect() as con, pytest.raises(FileExistsError, match="symbolic link"):
        keep_aside(store, con, now)
    _untouched(victim)
    assert planted.is_symlink()  # left as it was: not followed, not removed


def test_the_seed_subset_files_are_replaced_never_written_through(tmp_path: Path, victim: Path) -> None:
    from karma_dagster.kg.subset import write_subset

    out = tmp_path / "subset"
    out.mkdir()
    for name in ("nodes.tsv", "edges.sif.gz"):
        os.symlink(victim / "precious.txt", out / name)
    write_subset(out, [{"id": "Gene::1", "name": "A1BG", "kind": "Gene"}], [("Gene::1", "GiG", "Gene::1")])
    _untouched(victim)
    assert not (out / "nodes.tsv").is_symlink() and (out / "nodes.tsv").read_text().splitlines()[1] == "Gene::1\tA1BG\tGene"
    assert not (out / "edges.sif.gz").is_symlink()
