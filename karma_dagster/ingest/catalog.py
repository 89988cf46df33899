"""The document catalog: which key each paper has, which files hold it, and what each inbox file last gave.

A small SQLite file (WAL, busy timeout, `BEGIN IMMEDIATE` around each registration) so the sensor and
several run processes can read and register at once. A paper never gets a second key: a new source whose
PMCID, PMID, DOI or normalized-text hash is already known attaches to the existing key (the PDF and the JATS
of one article, or one PDF copied under two names). A changed file keeps the key its path had when it still
holds the same paper (a revision); when its identifiers (or, without any, its title) say it holds another paper,
that paper gets its own key and the old document keeps its key, results and KG evidence, recorded as replaced
(`karma remove <doc_key>` removes it).
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import sqlite3
import unicodedata
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.ingest.keys import content_hash, document_date, document_key
from karma_dagster.integrity import check_sqlite, sqlite_errors
from karma_dagster.schemas.records import ParsedDocument, SourceFormat

CATALOG_REMEDY = "restore it from a backup (moving it away makes the next `karma run` register the inbox anew)"
SOURCE_PREFERENCE: dict[str, int] = {"jats": 0, "pubtator": 1, "pdf": 2, "text": 3}
_SAME_TITLE = 0.6  # title similarity (difflib ratio) under which an identifier-less file holds another paper

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
-- Where each abstract of a PubTator file lies (bytes of its block), so loading one does not parse the file.
CREATE TABLE IF NOT EXISTS member_spans (
    source_path TEXT NOT NULL, member TEXT NOT NULL, start INTEGER NOT NULL, end_ INTEGER NOT NULL,
    PRIMARY KEY (source_path, member));
-- A source file that now holds another paper: the document it held keeps its key, results and KG evidence,
-- but is no longer read from that file (`karma remove <doc_key>` removes it).
CREATE TABLE IF NOT EXISTS replaced_sources (
    doc_key TEXT NOT NULL, source_path TEXT NOT NULL, member TEXT NOT NULL, by_doc_key TEXT NOT NULL,
    at TEXT NOT NULL, PRIMARY KEY (doc_key, source_path, member));
-- The input limits of the last scan: what loading a registered file applies unless told otherwise.
CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SourceRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    source_path: str
    member: str  # the PMID inside a PubTator file, else the document's index in its file ("0")
    source_format: SourceFormat
    file_hash: str | None
    content_hash: str
    registered: str


class Replacement(BaseModel):
    """A file (member) that held a document and now holds another paper (`by_doc_key`) since `at`."""

    source_path: str
    member: str
    by_doc_key: str
    at: str


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
    replaced: list[Replacement] = []  # files that held this document and now hold another paper

    @property
    def preferred_source(self) -> SourceRef:
        if not self.sources:
            gone = "; ".join(f"{r.source_path} now holds {r.by_doc_key}" for r in self.replaced)
            raise LookupError(f"{self.doc_key}: no source file holds this document any more ({gone or 'none registered'})")
        return self.sources[0]


class RemovedDocument(BaseModel):
    """What `Catalog.remove_document` deleted: the entry, and the files that held it (they stay in the inbox)."""

    doc_key: str
    source_paths: list[str]


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
    return _id_values(doc.pmcid, doc.pmid, doc.doi)


def _id_values(pmcid: str | None, pmid: str | None, doi: str | None) -> list[tuple[str, str]]:
    ids = []
    if pmcid:
        ids.append(("pmcid", pmcid.upper() if pmcid.lower().startswith("pmc") else f"PMC{pmcid}"))
    if pmid:
        ids.append(("pmid", pmid.strip()))
    if doi:
        ids.append(("doi", doi.strip().lower()))
    return ids


def _normalized_title(title: str | None) -> str:
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", title or "").casefold()))


def identity_differs(known: tuple[str | None, str | None, str | None, str | None], doc: ParsedDocument
                     ) -> tuple[str, str, str] | None:
    """(kind, known value, new value) when `doc` is another paper than the one known by (pmcid, pmid, doi, title).

    The strongest identifier both sides have decides (PMCID > PMID > DOI). With none in common, clearly
    different titles do ("title"); a corrected typo, or a missing title on either side, keeps the paper."""
    old = dict(_id_values(*known[:3]))
    new = dict(_identifiers(doc))
    for kind in ("pmcid", "pmid", "doi"):
        if kind in old and kind in new:
            return (kind, old[kind], new[kind]) if old[kind] != new[kind] else None
    a, b = _normalized_title(known[3]), _normalized_title(doc.title)
    if a and b and difflib.SequenceMatcher(None, a, b).ratio() < _SAME_TITLE:
        return ("title", known[3] or "", doc.title)
    return None


def _another_paper(con: sqlite3.Connection, doc_key: str, doc: ParsedDocument) -> bool:
    """Does `doc`, now in a file that held `doc_key`, differ in identity from that document?"""
    row = con.execute("SELECT pmcid, pmid, doi, title FROM documents WHERE doc_key=?", (doc_key,)).fetchone()
    return row is None or identity_differs(tuple(row), doc) is not None


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            check_sqlite(con, self.path, "catalog", ("documents",), CATALOG_REMEDY)  # before anything writes to it
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        try:
            with sqlite_errors(self.path, "catalog", CATALOG_REMEDY):  # a damaged page met by any read
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
                 file_hash: str | None = None, request: Literal["none", "created", "all"] = "none",
                 spans: Sequence[tuple[int, int] | None] | None = None, first_index: int = 0) -> list[Registration]:
        """Give every document its key: an existing one when any identifier or the text hash is known.

        `request` puts documents in the outbox in the same transaction: "created" = new keys only (a new file),
        "all" = every document of the file (its content changed). `spans` are the byte spans of PubTator
        abstracts (read back without parsing the file); `first_index` numbers a batch of a longer file."""
        out: list[Registration] = []
        with self._write() as con:
            for index, doc in enumerate(parsed_docs, first_index):
                member = member_of(doc, index)
                reg = self._register_one(con, doc, member, arrival_date, file_hash)
                span = spans[index - first_index] if spans is not None else None
                if span is not None:
                    con.execute("INSERT OR REPLACE INTO member_spans VALUES (?,?,?,?)",
                                (doc.source_path, member, span[0], span[1]))
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
        row = con.execute("SELECT doc_key FROM sources WHERE source_path=? AND member=?",
                          (doc.source_path, member)).fetchone()
        held = row[0] if row else None  # the document this file (member) held until now
        if key is None and held is not None and not _another_paper(con, held, doc):
            key = held  # the same paper, revised: same key, re-run
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
        if held is not None and held != key:  # the file now holds another paper: the old one keeps its results
            con.execute("INSERT OR REPLACE INTO replaced_sources VALUES (?,?,?,?,?)",
                        (held, doc.source_path, member, key, now))
        con.execute("DELETE FROM replaced_sources WHERE doc_key=? AND source_path=? AND member=?",
                    (key, doc.source_path, member))
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
            gone = con.execute("SELECT source_path, member, by_doc_key, at FROM replaced_sources WHERE doc_key=? "
                               "ORDER BY at, source_path, member", (doc_key,)).fetchall()
        sources = sorted(
            (SourceRef(source_path=s[0], member=s[1], source_format=s[2], file_hash=s[3], content_hash=s[4],
                       registered=s[5]) for s in srcs),
            key=lambda s: (SOURCE_PREFERENCE.get(s.source_format, 9), s.registered, s.source_path))
        replaced = [Replacement(source_path=g[0], member=g[1], by_doc_key=g[2], at=g[3]) for g in gone]
        return DocumentEntry(doc_key=row[0], date=dt.date.fromisoformat(row[1]), date_source=row[2], pmid=row[3],
                             pmcid=row[4], doi=row[5], title=row[6], first_registered=row[7], sources=sources,
                             replaced=replaced)

    def member_span(self, source_path: str, member: str) -> tuple[int, int] | None:
        """The byte span of a PubTator abstract as last scanned (None: not a PubTator member, or not recorded)."""
        with self._connect() as con:
            row = con.execute("SELECT start, end_ FROM member_spans WHERE source_path=? AND member=?",
                              (source_path, member)).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def set_setting(self, name: str, value: str) -> bool:
        """Remember a setting of the last scan (e.g. its input limits); True when it changed (or was unset)."""
        with self._connect() as con:
            row = con.execute("SELECT value FROM settings WHERE name=?", (name,)).fetchone()
        if row is not None and row[0] == value:
            return False
        with self._write() as con:
            con.execute("INSERT OR REPLACE INTO settings VALUES (?,?)", (name, value))
        return True

    def setting(self, name: str) -> str | None:
        with self._connect() as con:
            row = con.execute("SELECT value FROM settings WHERE name=?", (name,)).fetchone()
        return row[0] if row else None

    # ------------------------------------------------------------ removal (`karma remove`)
    def remove_document(self, doc_key: str) -> RemovedDocument | None:
        """Forget one document in one transaction: its entry, identifiers, sources, spans, pending requests and
        replacement records; files that listed it keep their record (an unchanged file is not registered again).
        None when the catalog does not know the key."""
        with self._write() as con:
            if con.execute("SELECT 1 FROM documents WHERE doc_key=?", (doc_key,)).fetchone() is None:
                return None
            paths = sorted({r[0] for r in con.execute("SELECT source_path FROM sources WHERE doc_key=? UNION "
                                                      "SELECT source_path FROM replaced_sources WHERE doc_key=?",
                                                      (doc_key, doc_key)).fetchall()})
            con.execute("DELETE FROM member_spans WHERE (source_path, member) IN "
                        "(SELECT source_path, member FROM sources WHERE doc_key=?)", (doc_key,))
            for table in ("sources", "identifiers", "requests", "replaced_sources", "documents"):
                con.execute(f"DELETE FROM {table} WHERE doc_key=?", (doc_key,))  # noqa: S608 - fixed table names
            for path, keys in con.execute("SELECT path, doc_keys FROM files").fetchall():
                if doc_key in keys.split():
                    con.execute("UPDATE files SET doc_keys=? WHERE path=?",
                                (" ".join(k for k in keys.split() if k != doc_key), path))
        return RemovedDocument(doc_key=doc_key, source_paths=paths)

    def documents_for_dates(self, start: dt.date, end: dt.date) -> list[str]:
        """Keys whose date lies in [start, end] (both included), in key order."""
        with self._connect() as con:
            rows = con.execute("SELECT doc_key FROM documents WHERE date BETWEEN ? AND ? ORDER BY doc_key",
                               (start.isoformat(), end.isoformat())).fetchall()
        return [r[0] for r in rows]

    def all_keys(self) -> list[str]:
        with self._connect() as con:
            return [r[0] for r in con.execute("SELECT doc_key FROM documents ORDER BY doc_key").fetchall()]
