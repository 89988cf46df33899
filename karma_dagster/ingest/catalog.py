"""The document catalog: which key each paper has, which files hold it, and what each inbox file last gave.

A small SQLite file (WAL, busy timeout, `BEGIN IMMEDIATE` around each registration) so the sensor and
several run processes can read and register at once. A paper never gets a second key: a new source whose
PMCID, PMID, DOI or normalized-text hash is already known attaches to the existing key (the PDF and the JATS
of one article, or one PDF copied under two names), and a changed file keeps the key its path had.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.ingest.keys import content_hash, document_date, document_key
from karma_dagster.schemas.records import ParsedDocument, SourceFormat

SOURCE_PREFERENCE: dict[str, int] = {"jats": 0, "pubtator": 1, "pdf": 2, "text": 3}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    doc_key TEXT PRIMARY KEY, date TEXT NOT NULL, date_source TEXT NOT NULL,
    pmid TEXT, pmcid TEXT, doi TEXT, title TEXT, first_registered TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS documents_date ON documents(date);
CREATE TABLE IF NOT EXISTS identifiers (
    kind TEXT NOT NULL, value TEXT NOT NULL, doc_key TEXT NOT NULL, PRIMARY KEY (kind, value));
CREATE TABLE IF NOT EXISTS sources (
    source_path TEXT NOT NULL, member TEXT NOT NULL, doc_key TEXT NOT NULL, source_format TEXT NOT NULL,
    file_hash TEXT, content_hash TEXT NOT NULL, registered TEXT NOT NULL, PRIMARY KEY (source_path, member));
CREATE INDEX IF NOT EXISTS sources_key ON sources(doc_key);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, file_hash TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
    doc_keys TEXT NOT NULL DEFAULT '', last_seen TEXT NOT NULL);
-- The outbox of documents to (re)process, written in the registration's own transaction: a sensor that
-- reads it by sequence number never loses a document to a crash between registering and requesting.
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, doc_key TEXT NOT NULL, content_hash TEXT NOT NULL, at TEXT NOT NULL);
"""


class SourceRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    source_path: str
    member: str  # the PMID inside a PubTator file, else the document's index in its file ("0")
    source_format: SourceFormat
    file_hash: str | None
    content_hash: str
    registered: str


class DocumentEntry(BaseModel):
    doc_key: str
    date: dt.date
    date_source: Literal["publication", "arrival"]
    pmid: str | None
    pmcid: str | None
    doi: str | None
    title: str | None
    first_registered: str
    sources: list[SourceRef]  # best source for reading first (jats > pubtator > pdf > text)

    @property
    def preferred_source(self) -> SourceRef:
        return self.sources[0]


class Registration(BaseModel):
    doc_key: str
    created: bool  # a new key (False: attached to or refreshed an existing one)
    source_path: str
    member: str
    source_format: SourceFormat
    date: dt.date
    date_source: Literal["publication", "arrival"]
    content_hash: str


class FileRecord(BaseModel):
    path: str
    file_hash: str
    status: Literal["ok", "failed"]
    error: str | None
    doc_keys: list[str]
    last_seen: str


def member_of(doc: ParsedDocument, index: int) -> str:
    return doc.pmid if doc.source_format == "pubtator" and doc.pmid else str(index)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _identifiers(doc: ParsedDocument) -> list[tuple[str, str]]:
    ids = []
    if doc.pmcid:
        ids.append(("pmcid", doc.pmcid.upper() if doc.pmcid.lower().startswith("pmc") else f"PMC{doc.pmcid}"))
    if doc.pmid:
        ids.append(("pmid", doc.pmid.strip()))
    if doc.doi:
        ids.append(("doi", doc.doi.strip().lower()))
    return ids


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            con.execute("PRAGMA busy_timeout=60000")
            yield con
        finally:
            con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One writer at a time, for the whole look-up-then-insert: no two processes can mint two keys."""
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    # ------------------------------------------------------------ registration
    def register(self, parsed_docs: Sequence[ParsedDocument], arrival_date: dt.date,
                 file_hash: str | None = None, request: Literal["none", "created", "all"] = "none") -> list[Registration]:
        """Give every document its key: an existing one when any identifier or the text hash is known.

        `request` puts documents in the outbox in the same transaction: "created" = new keys only (a new file),
        "all" = every document of the file (its content changed)."""
        out: list[Registration] = []
        with self._write() as con:
            for index, doc in enumerate(parsed_docs):
                reg = self._register_one(con, doc, member_of(doc, index), arrival_date, file_hash)
                out.append(reg)
                if request == "all" or (request == "created" and reg.created):
                    con.execute("INSERT INTO requests (doc_key, content_hash, at) VALUES (?,?,?)",
                                (reg.doc_key, reg.content_hash, _now()))
        return out

    def requests_after(self, seq: int) -> list[tuple[int, str, str]]:
        """(seq, doc_key, content_hash) of the outbox past `seq`, oldest first."""
        with self._connect() as con:
            return [tuple(r) for r in con.execute(
                "SELECT seq, doc_key, content_hash FROM requests WHERE seq > ? ORDER BY seq", (seq,)).fetchall()]

    def _register_one(self, con: sqlite3.Connection, doc: ParsedDocument, member: str, arrival_date: dt.date,
                      file_hash: str | None) -> Registration:
        chash = content_hash(doc)
        ids = _identifiers(doc)
        key: str | None = None
        for kind, value in ids:
            row = con.execute("SELECT doc_key FROM identifiers WHERE kind=? AND value=?", (kind, value)).fetchone()
            if row:
                key = row[0]
                break
        if key is None:
            row = con.execute("SELECT doc_key FROM sources WHERE source_path=? AND member=?",
                              (doc.source_path, member)).fetchone()
            key = row[0] if row else None
        if key is None:
            row = con.execute("SELECT doc_key FROM identifiers WHERE kind='content' AND value=?", (chash,)).fetchone()
            key = row[0] if row else None
        created = key is None
        now = _now()
        if key is None:
            date, date_source = document_date(doc, arrival_date)
            key = base = document_key(doc, arrival_date, chash)
            n = 1
            while con.execute("SELECT 1 FROM documents WHERE doc_key=?", (key,)).fetchone():
                n += 1
                key = f"{base}-{n}"
            con.execute("INSERT INTO documents VALUES (?,?,?,?,?,?,?,?)",
                        (key, date.isoformat(), date_source, doc.pmid, doc.pmcid, doc.doi, doc.title or None, now))
        else:
            con.execute(
                "UPDATE documents SET pmid=COALESCE(pmid,?), pmcid=COALESCE(pmcid,?), doi=COALESCE(doi,?), "
                "title=COALESCE(NULLIF(title,''),?) WHERE doc_key=?",
                (doc.pmid, doc.pmcid, doc.doi, doc.title or None, key))
        for kind, value in [*ids, ("content", chash)]:
            con.execute("INSERT OR IGNORE INTO identifiers VALUES (?,?,?)", (kind, value, key))
        con.execute(
            "INSERT INTO sources VALUES (?,?,?,?,?,?,?) ON CONFLICT(source_path, member) DO UPDATE SET "
            "doc_key=excluded.doc_key, source_format=excluded.source_format, file_hash=excluded.file_hash, "
            "content_hash=excluded.content_hash",
            (doc.source_path, member, key, doc.source_format, file_hash, chash, now))
        date_s, date_source_s = con.execute("SELECT date, date_source FROM documents WHERE doc_key=?",
                                            (key,)).fetchone()
        return Registration(doc_key=key, created=created, source_path=doc.source_path, member=member,
                            source_format=doc.source_format, date=dt.date.fromisoformat(date_s),
                            date_source=date_source_s, content_hash=chash)

    # ------------------------------------------------------------ files seen in the inbox
    def record_file(self, path: str, file_hash: str, status: Literal["ok", "failed"], error: str | None = None,
                    doc_keys: Sequence[str] = ()) -> None:
        with self._write() as con:
            con.execute(
                "INSERT INTO files VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET file_hash=excluded.file_hash,"
                " status=excluded.status, error=excluded.error, doc_keys=excluded.doc_keys, last_seen=excluded.last_seen",
                (path, file_hash, status, error, " ".join(dict.fromkeys(doc_keys)), _now()))

    def file_record(self, path: str) -> FileRecord | None:
        with self._connect() as con:
            row = con.execute("SELECT path, file_hash, status, error, doc_keys, last_seen FROM files WHERE path=?",
                              (path,)).fetchone()
        return self._file(row) if row else None

    def files(self) -> list[FileRecord]:
        with self._connect() as con:
            rows = con.execute("SELECT path, file_hash, status, error, doc_keys, last_seen FROM files ORDER BY path")
            return [self._file(r) for r in rows.fetchall()]

    @staticmethod
    def _file(row: tuple) -> FileRecord:
        return FileRecord(path=row[0], file_hash=row[1], status=row[2], error=row[3],
                          doc_keys=row[4].split() if row[4] else [], last_seen=row[5])

    # ------------------------------------------------------------ queries
    def lookup(self, doc_key: str) -> DocumentEntry | None:
        with self._connect() as con:
            row = con.execute("SELECT doc_key, date, date_source, pmid, pmcid, doi, title, first_registered "
                              "FROM documents WHERE doc_key=?", (doc_key,)).fetchone()
            if row is None:
                return None
            srcs = con.execute("SELECT source_path, member, source_format, file_hash, content_hash, registered "
                               "FROM sources WHERE doc_key=?", (doc_key,)).fetchall()
        sources = sorted(
            (SourceRef(source_path=s[0], member=s[1], source_format=s[2], file_hash=s[3], content_hash=s[4],
                       registered=s[5]) for s in srcs),
            key=lambda s: (SOURCE_PREFERENCE.get(s.source_format, 9), s.registered, s.source_path))
        return DocumentEntry(doc_key=row[0], date=dt.date.fromisoformat(row[1]), date_source=row[2], pmid=row[3],
                             pmcid=row[4], doi=row[5], title=row[6], first_registered=row[7], sources=sources)

    def documents_for_dates(self, start: dt.date, end: dt.date) -> list[str]:
        """Keys whose date lies in [start, end] (both included), in key order."""
        with self._connect() as con:
            rows = con.execute("SELECT doc_key FROM documents WHERE date BETWEEN ? AND ? ORDER BY doc_key",
                               (start.isoformat(), end.isoformat())).fetchall()
        return [r[0] for r in rows]

    def all_keys(self) -> list[str]:
        with self._connect() as con:
            return [r[0] for r in con.execute("SELECT doc_key FROM documents ORDER BY doc_key").fetchall()]
