"""One export of one namespace as of one date into one folder: the entry point of the CLI and the assets.

Files are written into a temporary sibling folder and renamed into place when every file is written and
checked, so a failed export never leaves a half-written folder where a complete one was. The folder must be new,
empty, or hold only an earlier export of the same format (kg/safe_output.py); anything else is refused before
anything is written, and checked again right before the swap.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from pydantic import BaseModel

from karma_dagster.export import FORMATS
from karma_dagster.export.snapshot import read_snapshot
from karma_dagster.kg.safe_output import TargetRefused, check_output_folder
from karma_dagster.kg.schema import KGSchema
from karma_dagster.kg.store import KGStore

REPORT = "export-report.json"


class ExportError(ValueError):
    """Bad export input (format, date, namespace, store); the message names it."""


class ExportResult(BaseModel):
    format: str
    namespace: str
    as_of: dt.date | None
    files: list[str]  # relative to the export folder
    counts: dict[str, int]
    snapshot: dict[str, int]  # what the KG held as of the date (nodes, edges, evidence, supersessions...)
    report: dict[str, object] = {}  # format-specific: unmapped kinds and relations, lossy mappings...
    seconds: float

    def summary(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        return f"{self.format} export of {self.namespace} as of {self.as_of or 'all dates'}: {counts}"


def parse_as_of(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except (TypeError, ValueError):
        raise ExportError(f"--as-of {text!r}: not a date; give an ISO date such as 2016-02-12") from None


def check_target(out_dir: Path, fmt: str, data=None) -> Path:  # noqa: ANN001 - DataPaths
    """The resolved export folder, or ExportError naming it: see kg/safe_output.py."""
    try:
        return check_output_folder(out_dir, kind=fmt, data=data, report=REPORT)
    except TargetRefused as exc:
        raise ExportError(f"--out {exc}") from None


# What RDF serialisers refuse inside an IRI (RFC 3987's excluded characters; rdflib's own check), plus whitespace.
IRI_FORBIDDEN = frozenset('<>"{}|\\^`')
BASE_IRI_SCHEMES = ("http", "https")


def check_base_iri(text: str) -> str:
    """The base IRI of a Turtle export, refused before anything is read or written when no reader could parse the
    IRIs built on it (rdflib would warn once per triple and then fail half-way through the file)."""
    from urllib.parse import urlsplit

    bad = sorted({c for c in text if c in IRI_FORBIDDEN or c.isspace() or not c.isprintable()})
    if bad:
        raise ExportError(f"--base-iri {text!r}: not an IRI, it holds {' '.join(repr(c) for c in bad)}; give an "
                          "absolute http(s) IRI such as https://kg.example.org/karma/")
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ExportError(f"--base-iri {text!r}: not an IRI ({exc})") from None
    if parts.scheme.lower() not in BASE_IRI_SCHEMES or not parts.netloc:
        raise ExportError(f"--base-iri {text!r}: not an absolute http(s) IRI; give one such as "
                          "https://kg.example.org/karma/")
    if parts.query or (parts.fragment and not text.endswith("#")):
        raise ExportError(f"--base-iri {text!r}: a base IRI has no query, and a fragment only as its final '#'")
    return text


def export_kg(store: KGStore, fmt: str, namespace: str, as_of: dt.date | None, out_dir: Path,
              schema: KGSchema | None = None, base_iri: str | None = None, data=None) -> ExportResult:  # noqa: ANN001
    """Write the `fmt` export of `namespace` as of `as_of` into out_dir (replacing an earlier export of the same
    format there, never anything else), plus export-report.json. data: the DataPaths whose folders are protected."""
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r}: not one of {', '.join(FORMATS)}")
    if base_iri:
        check_base_iri(base_iri)
    shown, out_dir = out_dir, check_target(out_dir, fmt, data)
    if not store.exists():
        raise ExportError("no KG in the data folder (or at $KARMA_KG_URL) yet: import the seed KG first "
                          "(`karma import-kg` or `karma run`)")
    t0 = time.perf_counter()
    snap = read_snapshot(store, namespace, as_of, schema)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would hide the export from the other users of a shared data folder
    try:
        report: dict[str, object] = {}
        if fmt == "turtle":
            from karma_dagster.export import turtle

            files, counts = turtle.write_turtle(snap, tmp, *([base_iri] if base_iri else []))
            report = {"provenance": "rdf:Statement reification (rdflib writes and reads no RDF-star)"}
        elif fmt == "kgx":
            from karma_dagster.export import kgx

            files, counts, report = kgx.write_kgx(snap, tmp)
        else:
            from karma_dagster.export import neo4j

            files, counts = neo4j.write_neo4j(snap, tmp)
        if snap.dangling_edges:
            report["dangling_edges_left_out"] = [f"{e.head_id} -{e.relation}-> {e.tail_id}"
                                                 for e in snap.dangling_edges[:20]]
        result = ExportResult(format=fmt, namespace=namespace, as_of=as_of, files=[*files, REPORT], counts=counts,
                              snapshot=snap.counts(), report=report, seconds=round(time.perf_counter() - t0, 2))
        (tmp / REPORT).write_text(result.model_dump_json(indent=2), encoding="utf-8")
        check_target(shown, fmt, data)  # still ours to replace (nothing was added meanwhile)
        _replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _replace(tmp: Path, out_dir: Path) -> None:
    """Swap the finished folder in; the previous export (checked to hold only its own files) is removed only once
    the new one is in place, from a fresh name: no folder that happens to be called like it is touched."""
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{uuid.uuid4().hex[:12]}")
        out_dir.rename(old)
    tmp.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_report(out_dir: Path) -> dict:
    return json.loads((out_dir / REPORT).read_text(encoding="utf-8"))
