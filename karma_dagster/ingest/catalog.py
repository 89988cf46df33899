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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from karma_dagster.ingest.dates import DateSource, DocumentDate, UndatedPolicy, decide_date, undated_reason
from karma_dagster.ingest.keys import content_hash, document_key
from karma_dagster.ingest.papers import PaperInfo, PaperLookup, first_author
from karma_dagster.ingest.source_rank import is_full_text, source_rank
from karma_dagster.runtime.integrity import check_sqlite, sqlite_errors
from karma_dagster.schemas.records import ParsedDocument, SourceFormat

CATALOG_REMEDY = "restore it from a backup (moving it away makes the next `karma run` register the inbox anew)"
# Which source of a paper is read: ingest/source_rank.py (full text before an abstract, whatever arrived first).
# Among MEDLINE sources of one paper, the latest revision comes first (`source_versions`).
PMID_MEMBERS = ("pubtator", "pubmed", "bioc")  # formats of many documents per file, each known by its PMID there
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
-- reads it by sequence number never loses a document to a crash between registering and requesting. A document
-- is requested when it is new or when its preferred source's text is not the text last requested for it.
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, doc_key TEXT NOT NULL, content_hash TEXT NOT NULL, at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS requests_key ON requests(doc_key, seq);
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
-- Documents without a publication date that the storage setting `undated: skip` kept out (ingest/dates.py).
CREATE TABLE IF NOT EXISTS skipped_undated (
    source_path TEXT NOT NULL, member TEXT NOT NULL, title TEXT, reason TEXT NOT NULL, at TEXT NOT NULL,
    PRIMARY KEY (source_path, member));
-- A document whose date changed (a dates file or sidecar gave the publication date of a document registered
-- under its arrival date) gets the key of its new date; its old key's KG evidence and stage tables are retired
-- by removal.retire_rekeyed (retired = 1 once done: a crash in between retries at the next scan).
CREATE TABLE IF NOT EXISTS rekeyed (
    old_key TEXT PRIMARY KEY, new_key TEXT NOT NULL, at TEXT NOT NULL, retired INTEGER NOT NULL DEFAULT 0);
-- The revision of a MEDLINE citation each PubMed file member holds: the latest DateRevised, then the file that
-- sorts last (MEDLINE numbers its files in order), is the paper's preferred citation whatever order the files
-- arrived in, and a newer one with other text re-runs it. (`seq`: unused, kept for catalogs made before.)
CREATE TABLE IF NOT EXISTS source_versions (
    source_path TEXT NOT NULL, member TEXT NOT NULL, revised TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (source_path, member));
-- PubMed's <DeleteCitation>: a PMID a PubMed file withdraws. It withdraws the citations of that PMID in files that
-- sort up to its own, never a later file's citation nor another format's source (a PDF, a JATS). 'pending' when
-- the document is left without any source, until removal.remove_deleted_citations has removed it as `karma remove`
-- does ('done'); 'kept' when the document stays on its other sources; 'unknown' when no document has the PMID;
-- 'cancelled' (catalogs made before) when a later file brought the citation back.
CREATE TABLE IF NOT EXISTS deletions (
    pmid TEXT NOT NULL, source_path TEXT NOT NULL, status TEXT NOT NULL, doc_key TEXT, at TEXT NOT NULL,
    PRIMARY KEY (pmid, source_path));
"""
# Columns added after catalogs existed: a catalog made before gets them when it is opened (Catalog.__init__),
# nullable, so documents registered before read as NULL (the date note is then unknown, not invented).
ADDED_COLUMNS = (("documents", "date_note", "TEXT"), ("sources", "full_text", "INTEGER"),
                 ("documents", "first_author", "TEXT"), ("documents", "journal", "TEXT"))


class SourceRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    source_path: str
    member: str  # the PMID inside a PubTator file, else the document's index in its file ("0")
    source_format: SourceFormat
    file_hash: str | None
    content_hash: str
    registered: str
    full_text: bool | None = None  # source_rank.is_full_text when registered (None: registered before it was recorded)


class Replacement(BaseModel):
    """A file (member) that held a document and now holds another paper (`by_doc_key`) since `at`."""

    source_path: str
    member: str
    by_doc_key: str
    at: str


class DocumentEntry(BaseModel):
    doc_key: str
    date: dt.date
    date_source: DateSource
    pmid: str | None
    pmcid: str | None
    doi: str | None
    title: str | None
    first_registered: str
    date_note: str | None = None  # where the date came from, or why there is no publication date (dates.py)
    sources: list[SourceRef]  # best source for reading first (source_rank; latest MEDLINE revision first)
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
    date_source: DateSource
    content_hash: str
    date_note: str | None = None
    rekeyed_from: str | None = None  # the key it had before its date changed (its old date's results retire)
    requested: bool = False  # put in the outbox: new, or its preferred source's text is not the one last requested


class Withdrawals(BaseModel):
    """What a PubMed file's `<DeleteCitation>` did: documents left without any source (removed as `karma remove`
    does by removal.remove_deleted_citations) and documents read again from their next source."""

    removed: list[str] = []
    rerun: list[str] = []


class SkippedUndated(BaseModel):
    """A document without a publication date that `undated: skip` did not register."""

    source_path: str
    member: str
    title: str | None
    reason: str


class RegisterOutcome(BaseModel):
    registrations: list[Registration] = []
    skipped_undated: list[SkippedUndated] = []


class FileRecord(BaseModel):
    path: str
    file_hash: str
    status: Literal["ok", "failed"]
    error: str | None
    doc_keys: list[str]
    last_seen: str


def member_of(doc: ParsedDocument, index: int) -> str:
    """A document's name inside its file: its PMID in a file of many (PubTator, PubMed, BioC), else its index."""
    return doc.pmid if doc.source_format in PMID_MEMBERS and doc.pmid else str(index)


def _version(revised: str, source_path: str) -> str:
    """A MEDLINE citation's order among its revisions: DateRevised, then the file's place in MEDLINE's numbering
    (the path's order), never the order the files arrived in."""
    return f"{revised}|{source_path}"


LOOKUP_CHUNK = 500  # keys per query of lookup_many (SQLite allows 32,766 parameters)

def _ordered(sources: Sequence[SourceRef], versions: dict[tuple[str, str], str]) -> list[SourceRef]:
    """Preferred first: by source_rank (full text before an abstract, ...), a MEDLINE citation's latest revision
    (then the later file) before older ones, then the first registered."""
    out = sorted(sources, key=lambda s: (s.registered, s.source_path))
    out.sort(key=lambda s: versions.get((s.source_path, s.member), ""), reverse=True)  # stable: ties keep order
    out.sort(key=lambda s: source_rank(s.source_format, s.full_text))
    return out


_SOURCE_COLUMNS = "source_path, member, source_format, file_hash, content_hash, registered, full_text"


def _source_ref(r: Sequence) -> SourceRef:
    """A SourceRef from the `_SOURCE_COLUMNS` of a row."""
    return SourceRef(source_path=r[0], member=r[1], source_format=r[2], file_hash=r[3], content_hash=r[4],
                     registered=r[5], full_text=None if r[6] is None else bool(r[6]))


def _in_chunks(con: sqlite3.Connection, sql: str, values: Iterable[str]) -> list[tuple]:
    """The rows of `sql` (its "{}" the IN list) over the distinct `values`, a query per LOOKUP_CHUNK of them."""
    wanted = sorted(set(values))
    rows: list[tuple] = []
    for lo in range(0, len(wanted), LOOKUP_CHUNK):
        chunk = wanted[lo:lo + LOOKUP_CHUNK]
        rows += con.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall()
    return rows


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
            for table, column, sql_type in ADDED_COLUMNS:  # an older catalog gets the columns added since
                if column not in {r[1] for r in con.execute(f"PRAGMA table_info({table})").fetchall()}:
                    try:
                        con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}")
                    except sqlite3.OperationalError as exc:  # another process added it first
                        if "duplicate column" not in str(exc):
                            raise

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
                 spans: Sequence[tuple[int, int] | None] | None = None, first_index: int = 0,
                 undated: UndatedPolicy | None = None) -> list[Registration]:
        """Give every document its key: an existing one when any identifier or the text hash is known.

        `request` puts documents in the outbox in the same transaction: "created" = new keys only (a new file),
        "all" = every document of the file (its content changed). `spans` are the byte spans of PubTator
        abstracts (read back without parsing the file); `first_index` numbers a batch of a longer file.
        `undated`: what a new document without a publication date does (default: dated by its arrival); the
        documents `skip` leaves out are in `register_batch`'s outcome and `skipped_undated()`."""
        return self.register_batch(parsed_docs, arrival_date, file_hash, request, spans, first_index,
                                   undated).registrations

    def register_batch(self, parsed_docs: Sequence[ParsedDocument], arrival_date: dt.date,
                       file_hash: str | None = None, request: Literal["none", "created", "all"] = "none",
                       spans: Sequence[tuple[int, int] | None] | None = None, first_index: int = 0,
                       undated: UndatedPolicy | None = None,
                       revisions: Sequence[dt.date | None] | None = None) -> RegisterOutcome:
        """`register`, with the documents `undated: skip` left out (recorded in the same transaction).

        `revisions`: each MEDLINE citation's DateRevised (a PubMed file), recorded with its source before the
        document's preferred source is decided. A document is requested (`request` "created" or "all") when it is
        new, or when its preferred source's text is not the text last requested for it; "all" (the file changed)
        also requests it when this file is its preferred source. A source that ranks below the one read (an
        abstract beside a full text, an older revision) is recorded and never re-runs the paper."""
        out: list[Registration] = []
        skipped: list[SkippedUndated] = []
        with self._write() as con:
            for index, doc in enumerate(parsed_docs, first_index):
                member = member_of(doc, index)
                reg = self._register_one(con, doc, member, arrival_date, file_hash, undated)
                if isinstance(reg, SkippedUndated):
                    skipped.append(reg)
                    continue
                span = spans[index - first_index] if spans is not None else None
                if span is not None:
                    con.execute("INSERT OR REPLACE INTO member_spans VALUES (?,?,?,?)",
                                (doc.source_path, member, span[0], span[1]))
                if revisions is not None:
                    when = revisions[index - first_index]
                    con.execute("INSERT OR REPLACE INTO source_versions VALUES (?,?,?,0)",
                                (doc.source_path, member, when.isoformat() if when else "0000-00-00"))
                if request != "none":
                    reg = reg.model_copy(update={"requested": self._request_if_preferred(con, reg, request)})
                out.append(reg)
        return RegisterOutcome(registrations=out, skipped_undated=skipped)

    def _request_if_preferred(self, con: sqlite3.Connection, reg: Registration,
                              request: Literal["created", "all"]) -> bool:
        """Put `reg`'s document in the outbox when it is new (or moved to another date), when its changed file is
        its preferred source, or when its preferred source's text is not the one last requested."""
        if reg.created:
            self._enqueue(con, reg.doc_key, reg.content_hash)
            return True
        best = self._best_source(con, reg.doc_key)
        if best is None:
            return False
        mine = (best.source_path, best.member) == (reg.source_path, reg.member)
        if reg.rekeyed_from or (request == "all" and mine):
            self._enqueue(con, reg.doc_key, best.content_hash)
            return True
        return self._request_if_changed(con, reg.doc_key, best)

    def _best_source(self, con: sqlite3.Connection, doc_key: str) -> SourceRef | None:
        srcs = [_source_ref(r) for r in con.execute(f"SELECT {_SOURCE_COLUMNS} FROM sources WHERE doc_key=?",
                                                   (doc_key,)).fetchall()]
        return _ordered(srcs, self._versions(con, doc_key))[0] if srcs else None

    def _request_if_changed(self, con: sqlite3.Connection, doc_key: str, best: SourceRef | None) -> bool:
        """Request `doc_key` when its preferred source `best` holds other text than the last request named."""
        if best is None:
            return False
        last = con.execute("SELECT content_hash FROM requests WHERE doc_key=? ORDER BY seq DESC LIMIT 1",
                           (doc_key,)).fetchone()
        if last is not None and last[0] == best.content_hash:
            return False
        self._enqueue(con, doc_key, best.content_hash)
        return True

    @staticmethod
    def _enqueue(con: sqlite3.Connection, doc_key: str, chash: str) -> None:
        con.execute("INSERT INTO requests (doc_key, content_hash, at) VALUES (?,?,?)", (doc_key, chash, _now()))

    def requests_after(self, seq: int, limit: int | None = None) -> list[tuple[int, str, str]]:
        """(seq, doc_key, content_hash) of the outbox past `seq`, oldest first; at most `limit` of them."""
        with self._connect() as con:
            return [tuple(r) for r in con.execute(
                "SELECT seq, doc_key, content_hash FROM requests WHERE seq > ? ORDER BY seq LIMIT ?",
                (seq, -1 if limit is None else limit)).fetchall()]

    def _register_one(self, con: sqlite3.Connection, doc: ParsedDocument, member: str, arrival_date: dt.date,
                      file_hash: str | None, undated: UndatedPolicy | None = None
                      ) -> Registration | SkippedUndated:
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
            key = row[0] if row and not _another_paper(con, row[0], doc) else None  # same text, another PMID: two
        created = key is None
        now = _now()
        decided = decide_date(doc, arrival_date, undated)
        rekeyed_from = None
        if key is None:
            if decided is None:  # `undated: skip`: nothing registered, the skip recorded
                reason = undated_reason(doc)
                con.execute("INSERT OR REPLACE INTO skipped_undated VALUES (?,?,?,?,?)",
                            (doc.source_path, member, doc.title or None, reason, now))
                return SkippedUndated(source_path=doc.source_path, member=member, title=doc.title or None,
                                      reason=reason)
            key = base = document_key(doc, arrival_date, chash, date=decided.date)
            n = 1
            while con.execute("SELECT 1 FROM documents WHERE doc_key=?", (key,)).fetchone():
                n += 1
                key = f"{base}-{n}"
            con.execute("INSERT INTO documents (doc_key, date, date_source, pmid, pmcid, doi, title, "
                        "first_registered, date_note, first_author, journal) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (key, decided.date.isoformat(), decided.source, doc.pmid, doc.pmcid, doc.doi,
                         doc.title or None, now, decided.note, first_author(doc), doc.journal or None))
        else:
            if decided is not None and (moved := self._redate(con, key, held, decided)) is not None:
                rekeyed_from, key = key, moved
                held = key if held == rekeyed_from else held  # the same paper, moved: not a replacement
            con.execute(
                "UPDATE documents SET pmid=COALESCE(pmid,?), pmcid=COALESCE(pmcid,?), doi=COALESCE(doi,?), "
                "title=COALESCE(NULLIF(title,''),?), first_author=COALESCE(first_author,?), "
                "journal=COALESCE(journal,?) WHERE doc_key=?",
                (doc.pmid, doc.pmcid, doc.doi, doc.title or None, first_author(doc), doc.journal or None, key))
        for kind, value in [*ids, ("content", chash)]:
            con.execute("INSERT OR IGNORE INTO identifiers VALUES (?,?,?)", (kind, value, key))
        if held is not None and held != key:  # the file now holds another paper: the old one keeps its results
            con.execute("INSERT OR REPLACE INTO replaced_sources VALUES (?,?,?,?,?)",
                        (held, doc.source_path, member, key, now))
        con.execute("DELETE FROM replaced_sources WHERE doc_key=? AND source_path=? AND member=?",
                    (key, doc.source_path, member))
        con.execute(
            "INSERT INTO sources (source_path, member, doc_key, source_format, file_hash, content_hash, registered, "
            "full_text) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(source_path, member) DO UPDATE SET "
            "doc_key=excluded.doc_key, source_format=excluded.source_format, file_hash=excluded.file_hash, "
            "content_hash=excluded.content_hash, full_text=excluded.full_text",
            (doc.source_path, member, key, doc.source_format, file_hash, chash, now, int(is_full_text(doc))))
        # a source again: a removal pending for the document's PMID (a <DeleteCitation> left it none) is moot
        con.execute("UPDATE deletions SET status='kept' WHERE status='pending' AND pmid IN (SELECT pmid FROM "
                    "documents WHERE doc_key=? UNION SELECT ?)", (key, doc.pmid))
        con.execute("DELETE FROM skipped_undated WHERE source_path=? AND member=?", (doc.source_path, member))
        date_s, date_source_s, note = con.execute("SELECT date, date_source, date_note FROM documents WHERE "
                                                  "doc_key=?", (key,)).fetchone()
        return Registration(doc_key=key, created=created, source_path=doc.source_path, member=member,
                            source_format=doc.source_format, date=dt.date.fromisoformat(date_s),
                            date_source=date_source_s, content_hash=chash, date_note=note,
                            rekeyed_from=rekeyed_from)

    def _redate(self, con: sqlite3.Connection, key: str, held: str | None, decided: DocumentDate) -> str | None:
        """The new key of a known document whose publication date is now given and differs from its key's date,
        else None. It moves when it was undated (arrival or configured date) or when the file (member) that holds
        it now gives another publication date (a corrected dates file or sidecar); another copy of a dated paper
        with a slightly different date (a PDF's printed date beside its JATS) does not move it."""
        row = con.execute("SELECT date, date_source FROM documents WHERE doc_key=?", (key,)).fetchone()
        if decided.source != "publication" or row is None or row[0] == decided.date.isoformat():
            return None
        if row[1] == "publication" and held != key:
            return None
        return self._rekey(con, key, decided)

    @staticmethod
    def _rekey(con: sqlite3.Connection, old: str, decided: DocumentDate) -> str:
        """Move a document to the key of its new date in this transaction: its entry, identifiers, sources, spans
        (same files, nothing to move), replacement records and the files listing it; pending requests of the old
        key dropped (the new key is requested); the old key recorded in `rekeyed` for its results to retire."""
        base = f"{decided.date.isoformat()}_{old.split('_', 1)[1]}"
        new, n = base, 1
        while con.execute("SELECT 1 FROM documents WHERE doc_key=?", (new,)).fetchone():
            n += 1
            new = f"{base}-{n}"
        con.execute("INSERT INTO documents (doc_key, date, date_source, pmid, pmcid, doi, title, first_registered, "
                    "date_note) SELECT ?, ?, ?, pmid, pmcid, doi, title, first_registered, ? FROM documents WHERE "
                    "doc_key=?", (new, decided.date.isoformat(), decided.source, decided.note, old))
        for table in ("identifiers", "sources", "replaced_sources"):
            con.execute(f"UPDATE {table} SET doc_key=? WHERE doc_key=?", (new, old))  # noqa: S608 - fixed names
        con.execute("UPDATE replaced_sources SET by_doc_key=? WHERE by_doc_key=?", (new, old))
        con.execute("DELETE FROM requests WHERE doc_key=?", (old,))
        for path, keys in con.execute("SELECT path, doc_keys FROM files").fetchall():
            if old in keys.split():
                con.execute("UPDATE files SET doc_keys=? WHERE path=?",
                            (" ".join(new if k == old else k for k in keys.split()), path))
        con.execute("DELETE FROM documents WHERE doc_key=?", (old,))
        con.execute("UPDATE rekeyed SET new_key=? WHERE new_key=?", (new, old))  # moved twice: one chain
        con.execute("INSERT OR REPLACE INTO rekeyed VALUES (?,?,?,0)", (old, new, _now()))
        return new

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
        return self.lookup_many([doc_key]).get(doc_key)

    def lookup_many(self, doc_keys: Sequence[str]) -> dict[str, DocumentEntry]:
        """The entries of these keys that the catalog knows, in one connection and a few queries per LOOKUP_CHUNK
        keys (the controller reads a backfill's every document: a connection per key cost ~0.8 ms, a month of
        PubMed is ~100,000 documents)."""
        found: dict[str, DocumentEntry] = {}
        keys = list(dict.fromkeys(doc_keys))
        with self._connect() as con:
            for lo in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[lo:lo + LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = con.execute("SELECT doc_key, date, date_source, pmid, pmcid, doi, title, first_registered, "
                                   f"date_note FROM documents WHERE doc_key IN ({marks})", chunk).fetchall()
                srcs: dict[str, list[SourceRef]] = {}
                for r in con.execute(f"SELECT doc_key, {_SOURCE_COLUMNS} FROM sources WHERE doc_key IN ({marks})",
                                     chunk):
                    srcs.setdefault(r[0], []).append(_source_ref(r[1:]))
                gone: dict[str, list[Replacement]] = {}
                for g in con.execute("SELECT doc_key, source_path, member, by_doc_key, at FROM replaced_sources "
                                     f"WHERE doc_key IN ({marks}) ORDER BY at, source_path, member", chunk):
                    gone.setdefault(g[0], []).append(Replacement(source_path=g[1], member=g[2], by_doc_key=g[3], at=g[4]))
                versions: dict[str, dict[tuple[str, str], str]] = {}
                for v in con.execute("SELECT s.doc_key, v.source_path, v.member, v.revised FROM source_versions v "
                                     "JOIN sources s ON s.source_path = v.source_path AND s.member = v.member "
                                     f"WHERE s.doc_key IN ({marks})", chunk):
                    versions.setdefault(v[0], {})[(v[1], v[2])] = _version(v[3], v[1])
                for row in rows:
                    key = row[0]
                    found[key] = DocumentEntry(
                        doc_key=key, date=dt.date.fromisoformat(row[1]), date_source=row[2], pmid=row[3], pmcid=row[4],
                        doi=row[5], title=row[6], first_registered=row[7], date_note=row[8],
                        sources=_ordered(srcs.get(key, []), versions.get(key, {})), replaced=gone.get(key, []))
        return found

    def member_span(self, source_path: str, member: str) -> tuple[int, int] | None:
        """The byte span of a PubTator abstract or PubMed citation as last scanned (None: not recorded)."""
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
            for table in ("member_spans", "source_versions"):
                con.execute(f"DELETE FROM {table} WHERE (source_path, member) IN "  # noqa: S608 - fixed names
                            "(SELECT source_path, member FROM sources WHERE doc_key=?)", (doc_key,))
            for table in ("sources", "identifiers", "requests", "replaced_sources", "documents"):
                con.execute(f"DELETE FROM {table} WHERE doc_key=?", (doc_key,))  # noqa: S608 - fixed table names
            for path, keys in con.execute("SELECT path, doc_keys FROM files").fetchall():
                if doc_key in keys.split():
                    con.execute("UPDATE files SET doc_keys=? WHERE path=?",
                                (" ".join(k for k in keys.split() if k != doc_key), path))
        return RemovedDocument(doc_key=doc_key, source_paths=paths)

    # ------------------------------------------------------------ MEDLINE revisions and deletions (PubMed files)
    @staticmethod
    def _versions(con: sqlite3.Connection, doc_key: str) -> dict[tuple[str, str], str]:
        rows = con.execute("SELECT v.source_path, v.member, v.revised FROM source_versions v JOIN sources s "
                           "ON s.source_path = v.source_path AND s.member = v.member WHERE s.doc_key=?",
                           (doc_key,)).fetchall()
        return {(r[0], r[1]): _version(r[2], r[0]) for r in rows}

    def record_deletions(self, source_path: str, pmids: Sequence[str]) -> Withdrawals:
        """Carry out, in the catalog, the `<DeleteCitation>` of a PubMed file (once per file and PMID): the PMID's
        MEDLINE citations in files that sort up to this one are withdrawn (MEDLINE numbers its files in order; an
        update file lists its deletions after its citations). A later file's citation, and every other format's
        source (a PDF, a JATS, a PubTator abstract), stay. A document left without any source is pending removal
        (`removed`; removal.remove_deleted_citations carries it out); one whose preferred source was withdrawn is
        requested again from its next source (`rerun`)."""
        out = Withdrawals()
        with self._write() as con:
            for pmid in dict.fromkeys(pmids):
                if con.execute("SELECT 1 FROM deletions WHERE pmid=? AND source_path=?",
                               (pmid, source_path)).fetchone():
                    continue
                row = con.execute("SELECT doc_key FROM identifiers WHERE kind='pmid' AND value=?", (pmid,)).fetchone()
                key = row[0] if row else None
                status = "unknown" if key is None else "kept"
                if key is not None and self._withdraw_citations(con, pmid, source_path):
                    best = self._best_source(con, key)
                    if best is None:
                        status = "pending"
                        out.removed.append(key)
                    elif self._request_if_changed(con, key, best):
                        out.rerun.append(key)
                con.execute("INSERT INTO deletions VALUES (?,?,?,?,?)", (pmid, source_path, status, key, _now()))
        return out

    @staticmethod
    def _withdraw_citations(con: sqlite3.Connection, pmid: str, upto: str) -> list[tuple[str, str]]:
        """Forget the MEDLINE citations of `pmid` in files sorting up to `upto` (their source rows, spans and
        revisions; a file that no longer gives its document anything stops listing it); returns them."""
        rows = con.execute("SELECT source_path, member, doc_key FROM sources WHERE source_format='pubmed' AND "
                           "member=? AND source_path <= ?", (pmid, upto)).fetchall()
        for path, member, key in rows:
            for table in ("sources", "member_spans", "source_versions"):
                con.execute(f"DELETE FROM {table} WHERE source_path=? AND member=?",  # noqa: S608 - fixed names
                            (path, member))
            if con.execute("SELECT 1 FROM sources WHERE source_path=? AND doc_key=?", (path, key)).fetchone() is None:
                listed = con.execute("SELECT doc_keys FROM files WHERE path=?", (path,)).fetchone()
                if listed is not None:
                    con.execute("UPDATE files SET doc_keys=? WHERE path=?",
                                (" ".join(k for k in listed[0].split() if k != key), path))
        return [(r[0], r[1]) for r in rows]

    def withdrawn_pmids(self, source_path: str) -> set[str]:
        """PMIDs a PubMed file sorting at or after `source_path` deleted: a citation of `source_path` with one of
        them is not registered (an older file arriving late never brings back what a later one withdrew)."""
        with self._connect() as con:
            rows = con.execute("SELECT pmid FROM deletions WHERE source_path >= ?", (source_path,)).fetchall()
        return {r[0] for r in rows}

    def pending_deletions(self) -> list[tuple[str, str]]:
        """(doc_key, pmid) of the recorded deletions not yet carried out, each document's current key (a document
        that got a source again since is not among them)."""
        with self._connect() as con:
            rows = con.execute("SELECT DISTINCT d.pmid, i.doc_key FROM deletions d LEFT JOIN identifiers i ON "
                               "i.kind='pmid' AND i.value=d.pmid WHERE d.status='pending' AND NOT EXISTS "
                               "(SELECT 1 FROM sources s WHERE s.doc_key = i.doc_key) ORDER BY d.pmid").fetchall()
        return [(r[1] or "", r[0]) for r in rows]

    def finish_deletion(self, pmid: str, doc_key: str) -> None:
        with self._write() as con:
            con.execute("UPDATE deletions SET status='done', doc_key=? WHERE pmid=? AND status='pending'",
                        (doc_key or None, pmid))

    def documents_for_dates(self, start: dt.date, end: dt.date) -> list[str]:
        """Keys whose date lies in [start, end] (both included), in key order."""
        with self._connect() as con:
            rows = con.execute("SELECT doc_key FROM documents WHERE date BETWEEN ? AND ? ORDER BY doc_key",
                               (start.isoformat(), end.isoformat())).fetchall()
        return [r[0] for r in rows]

    def documents_of_day(self, date: str) -> list[str]:
        """Keys dated on `date` (ISO), in key order: what a date partition holds (partitioning/mode.py)."""
        day = dt.date.fromisoformat(date)
        return self.documents_for_dates(day, day)

    def documents_of_days(self, dates: Iterable[str]) -> dict[str, list[str]]:
        """{date: its keys in key order} for these ISO dates (a date without documents is absent): the dates a
        sensor tick looks at, in a query per LOOKUP_CHUNK dates however large the catalog."""
        out: dict[str, list[str]] = {}
        with self._connect() as con:
            for key, date in sorted(_in_chunks(con, "SELECT doc_key, date FROM documents WHERE date IN ({})", dates)):
                out.setdefault(date, []).append(key)
        return out

    def dates_after(self, date: str, documents: int) -> list[str]:
        """The dates after `date` ("" for the first), in order, until they hold at least `documents` documents
        (at least one date; [] past the last): a slice of the catalog read through the date index alone, so a
        sweep over ten million documents costs the same per slice as over a thousand."""
        chosen: list[str] = []
        total = 0
        with self._connect() as con:
            while total < documents:
                rows = con.execute("SELECT date, count(*) FROM documents WHERE date > ? GROUP BY date ORDER BY date "
                                   "LIMIT 200", (chosen[-1] if chosen else date,)).fetchall()
                for day, n in rows:
                    chosen.append(day)
                    total += n
                    if total >= documents:
                        break
                if len(rows) < 200:
                    break
        return chosen

    def registered(self, doc_keys: Iterable[str]) -> set[str]:
        """Those of these keys that the catalog holds (a query per LOOKUP_CHUNK keys)."""
        with self._connect() as con:
            return {r[0] for r in _in_chunks(con, "SELECT doc_key FROM documents WHERE doc_key IN ({})", doc_keys)}

    def papers(self, doc_keys: Iterable[str]) -> dict[str, PaperInfo]:
        """doc_key -> how pages name the paper (title, first author, journal, date), for the keys the catalog knows."""
        keys = list(dict.fromkeys(doc_keys))
        found: dict[str, PaperInfo] = {}
        with self._connect() as con:
            for lo in range(0, len(keys), LOOKUP_CHUNK):
                chunk = keys[lo:lo + LOOKUP_CHUNK]
                for r in con.execute("SELECT doc_key, title, first_author, journal, date, date_source, pmid, doi "
                                     f"FROM documents WHERE doc_key IN ({','.join('?' * len(chunk))})", chunk):
                    found[r[0]] = PaperInfo(doc_key=r[0], title=r[1], first_author=r[2], journal=r[3],
                                            date=dt.date.fromisoformat(r[4]), date_source=r[5], pmid=r[6], doi=r[7])
        return found

    def all_keys(self) -> list[str]:
        with self._connect() as con:
            return [r[0] for r in con.execute("SELECT doc_key FROM documents ORDER BY doc_key").fetchall()]

    # ------------------------------------------------------------ dates (ingest/dates.py)
    def undated(self) -> list[DocumentEntry]:
        """Documents without a publication date (dated by arrival or by the `undated` setting), in key order;
        their `sources` are left empty (what the status and the report list needs is the entry and its note)."""
        with self._connect() as con:
            rows = con.execute("SELECT doc_key, date, date_source, pmid, pmcid, doi, title, first_registered, "
                               "date_note FROM documents WHERE date_source != 'publication' ORDER BY doc_key"
                               ).fetchall()
        return [DocumentEntry(doc_key=r[0], date=dt.date.fromisoformat(r[1]), date_source=r[2], pmid=r[3],
                              pmcid=r[4], doi=r[5], title=r[6], first_registered=r[7], sources=[], date_note=r[8])
                for r in rows]

    def date_counts(self) -> dict[str, int]:
        """Registered documents per date source (publication, arrival, configured)."""
        with self._connect() as con:
            return dict(con.execute("SELECT date_source, count(*) FROM documents GROUP BY 1").fetchall())

    def date_sources(self, doc_keys: Sequence[str]) -> dict[str, str]:
        """doc_key -> its date source, for the keys the catalog knows (what each KG evidence row records)."""
        if not doc_keys:
            return {}
        with self._connect() as con:
            con.execute("CREATE TEMP TABLE IF NOT EXISTS _keys (k TEXT PRIMARY KEY)")
            con.execute("DELETE FROM _keys")
            con.executemany("INSERT OR IGNORE INTO _keys VALUES (?)", [(k,) for k in doc_keys])
            rows = con.execute("SELECT doc_key, date_source FROM documents JOIN _keys ON k = doc_key").fetchall()
        return dict(rows)

    def skipped_undated(self) -> list[SkippedUndated]:
        """Documents `undated: skip` kept out, by file and member."""
        with self._connect() as con:
            rows = con.execute("SELECT source_path, member, title, reason FROM skipped_undated "
                               "ORDER BY source_path, member").fetchall()
        return [SkippedUndated(source_path=r[0], member=r[1], title=r[2], reason=r[3]) for r in rows]

    def clear_skipped(self, source_path: str) -> None:
        """Forget a file's skipped documents before it is registered again (what it skips now is recorded anew)."""
        with self._write() as con:
            con.execute("DELETE FROM skipped_undated WHERE source_path=?", (source_path,))

    def has_skipped(self, source_path: str) -> bool:
        with self._connect() as con:
            return con.execute("SELECT 1 FROM skipped_undated WHERE source_path=? LIMIT 1",
                               (source_path,)).fetchone() is not None

    def pending_rekeys(self) -> list[tuple[str, str]]:
        """(old key, new key) of documents moved to another date whose old key's results are not retired yet."""
        with self._connect() as con:
            return [tuple(r) for r in con.execute(
                "SELECT old_key, new_key FROM rekeyed WHERE retired = 0 ORDER BY at, old_key").fetchall()]

    def mark_retired(self, old_key: str) -> None:
        with self._write() as con:
            con.execute("UPDATE rekeyed SET retired = 1 WHERE old_key=?", (old_key,))


def catalog_lookup(catalog_path: Path) -> PaperLookup:
    """The papers of these keys from the data folder's catalog; nothing (and no file created) before there is one."""
    def lookup(doc_keys: Iterable[str]) -> dict[str, PaperInfo]:
        return Catalog(catalog_path).papers(doc_keys) if catalog_path.is_file() else {}

    return lookup
