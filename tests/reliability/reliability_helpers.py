"""Shared helpers of the reliability suite: KG dumps to compare runs, bad-file makers, leftover checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pymupdf

REPO = Path(__file__).resolve().parents[2]
SAMPLE_INBOX = REPO / "data" / "inbox"

# Columns that name the run, not the graph: a rerun has a new run id and merge time, and nothing else differs.
_VOLATILE = {"run_id", "merged_at"}
KG_TABLES = ("extracted_nodes", "evidence", "increments")


def kg_dump(path: Path, *, with_increment_stats: bool = True) -> dict[str, Any]:
    """Every row of the KG's own tables (without run ids / merge times) and the sizes of the graph views."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out: dict[str, Any] = {}
        for table in KG_TABLES:
            cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall() if r[0] not in _VOLATILE]
            if table == "increments" and not with_increment_stats:
                cols = ["namespace", "date", "n_docs", "n_evidence"]
            out[table] = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY ALL").fetchall()
        out["edges"] = con.execute(
            "SELECT namespace, head_id, relation, tail_id, round(confidence, 12), n_evidence FROM edges ORDER BY ALL"
        ).fetchall()
        out["n_nodes"] = con.execute("SELECT namespace, count(*) FROM nodes GROUP BY ALL ORDER BY ALL").fetchall()
        out["tables"] = sorted(r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall())
        return out
    finally:
        con.close()


def kg_state(path: Path) -> dict[str, Any]:
    """`kg_dump` plus which documents each namespace merged and from which table (merged_documents, without run
    ids and times): what "the same KG" means when a crashed run is compared with an uninterrupted one."""
    out = kg_dump(path)
    out["merged_documents"] = kg_query(
        path, "SELECT namespace, doc_key, date, fingerprint FROM merged_documents ORDER BY ALL")
    return out


def kg_query(path: Path, sql: str, params: list[Any] | None = None) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def leftovers(root: Path) -> list[str]:
    """Temp files a crashed or failed write would leave behind (stage tables are written tmp + rename)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp"))


# ------------------------------------------------------------------ bad inputs
from bad_files import encrypted_pdf, image_only_pdf, zero_page_pdf  # noqa: E402,F401 - re-exported for the suite


def long_pdf(path: Path, pages: int = 1000) -> None:
    """A real text PDF of `pages` pages (a paragraph each), like a thesis or a whole journal issue."""
    doc = pymupdf.open()
    text = ("Cisplatin induced nephrotoxicity in the treated rats; aspirin reduced hypertension. " * 6).strip()
    for i in range(pages):
        page = doc.new_page()
        page.insert_textbox(pymupdf.Rect(72, 72, 540, 720), f"Section {i + 1}\n{text}", fontsize=10)
    doc.save(path, garbage=0, deflate=True)


def corrupt_pdf_bytes() -> bytes:
    return b"%PDF-1.7\n" + bytes(range(256)) * 40 + b"\n%%EOF\n"


def malformed_pubtator(path: Path) -> None:
    lines = (SAMPLE_INBOX / "abstracts.pubtator").read_text(encoding="utf-8").split("\n")[:5]
    lines.insert(3, "14510914\tnot-a-number\tfoo")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


HERE_CHILD = Path(__file__).resolve().parent / "run_child.py"


# ------------------------------------------------------------------ `karma run` in a child process
def karma_spec(root: Path, cache: Path, inbox: Path, **extra: Any) -> dict[str, Any]:
    """run_child.py's spec for `karma run` over `inbox` with its own data folder and DAGSTER_HOME under `root`."""
    (root / "dagster_home").mkdir(parents=True, exist_ok=True)
    return {"cli": ["run"], "data_dir": str(root / "karma"), "inbox": str(inbox), "cache_dir": str(cache),
            "dagster_home": str(root / "dagster_home"), "namespaces": ["local"], **extra}


def start_karma(spec: dict[str, Any], cwd: Path) -> "subprocess.Popen[bytes]":
    """`karma <spec["cli"]>` in a child process (run_child.py); its output goes to files under `cwd`."""
    import json
    import subprocess
    import sys

    cwd.mkdir(parents=True, exist_ok=True)
    with (cwd / "child.out").open("wb") as out, (cwd / "child.err").open("wb") as err:
        return subprocess.Popen([sys.executable, str(HERE_CHILD), json.dumps(spec)], cwd=cwd, stdout=out, stderr=err)


def child_output(cwd: Path) -> tuple[str, str]:
    return ((cwd / "child.out").read_text(errors="replace"), (cwd / "child.err").read_text(errors="replace"))


def wait_for_pause(child: "subprocess.Popen[bytes]", signal_file: Path, cwd: Path, timeout_s: float = 240) -> str:
    """Wait until the child reached its pause point (it wrote `signal_file`); returns where it paused."""
    import time

    deadline = time.monotonic() + timeout_s
    while not signal_file.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not signal_file.exists():
        child.kill()
        child.wait(10)
        raise AssertionError(f"the child never reached its pause point: {child_output(cwd)[1][-3000:]}")
    time.sleep(0.05)  # the file is written before the sleep starts
    return signal_file.read_text()


def run_karma(spec: dict[str, Any], cwd: Path, timeout_s: float = 600) -> tuple[int, str, str]:
    """`karma <spec["cli"]>` in a child to its end: (exit code, stdout, stderr)."""
    child = start_karma(spec, cwd)
    try:
        code = child.wait(timeout_s)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    return (code, *child_output(cwd))


def dagster_instance(home: Path):  # noqa: ANN201 - a DagsterInstance over a child's DAGSTER_HOME, to read its runs
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
