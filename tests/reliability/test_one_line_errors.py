"""One-line errors: the real `karma` CLI, run as a clumsy user runs it (bad dates, names, paths, URLs, a file where a
folder belongs, a full or read-only disk), ends in exactly one stderr line that names the input, with exit 2 for
bad input and 1 for a failure, never a traceback; `--debug` shows the traceback.

Each home gets a dagster.yaml: without it Dagster logs one harmless line ("No dagster instance configuration
file") on a fresh DAGSTER_HOME, which is Dagster's, not an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def karma(args: list[str], home: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "DAGSTER_HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(REPO), **(env or {})}
    for var in ("KARMA_KG_URL", "KARMA_STORAGE_URL", "KARMA_KG_START_DATE"):
        if var not in (env or {}):
            full.pop(var, None)
    return subprocess.run([sys.executable, "-m", "karma_dagster.cli", *args], capture_output=True, text=True,
                          env=full, timeout=300, cwd=REPO)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "a-folder").mkdir()
    return home


# (case, args ({tmp} is the test's folder), env, exit status, what the line must name)
CASES = [
    ("bad date", ["backfill", "--start", "2020-13-01", "--end", "2020-12-31"], {}, 2, "2020-13-01"),
    ("end before start", ["backfill", "--start", "2020-02-01", "--end", "2020-01-01"], {}, 2, "--end 2020-01-01"),
    ("unknown command", ["nosuchcommand"], {}, 2, "nosuchcommand"),
    ("no command", [], {}, 2, "command"),
    ("unknown backbone", ["status", "--backbone", "nosuch", "--data-dir", "{tmp}/data"], {}, 2, "nosuch"),
    ("data dir is a file", ["status", "--data-dir", "{tmp}/a-file"], {}, 2, "{tmp}/a-file"),
    ("ledger data dir is a file", ["ledger", "--data-dir", "{tmp}/a-file"], {}, 2, "{tmp}/a-file"),
    ("ledger bad column", ["ledger", "--by", "cost; DROP", "--data-dir", "{tmp}/data"], {}, 2, "cost; DROP"),
    ("bad KG URL", ["status", "--data-dir", "{tmp}/data"], {"KARMA_KG_URL": "http://kg.example"}, 2, "KARMA_KG_URL"),
    ("bad storage URL", ["status", "--data-dir", "{tmp}/data"], {"KARMA_STORAGE_URL": "ftp://bucket"}, 2,
     "KARMA_STORAGE_URL"),
    ("bad start date", ["status", "--data-dir", "{tmp}/data"], {"KARMA_KG_START_DATE": "someday"}, 2,
     "KARMA_KG_START_DATE"),
    ("missing node table", ["import-kg", "--nodes", "{tmp}/nodes.tsv", "--data-dir", "{tmp}/data"], {}, 2,
     "{tmp}/nodes.tsv"),
    ("node table is a folder", ["import-kg", "--nodes", "{tmp}/a-folder", "--data-dir", "{tmp}/data"], {}, 2,
     "{tmp}/a-folder"),
    ("PubTator is a folder", ["gold-eval", "--backbone", "local", "--pubtator", "{tmp}/a-folder"], {}, 2,
     "{tmp}/a-folder"),
    ("unknown export format", ["export", "--format", "rdfxml", "--data-dir", "{tmp}/data"], {}, 2, "rdfxml"),
    ("unsafe document key", ["remove", "../../etc/passwd", "--data-dir", "{tmp}/data"], {}, 2, "../../etc/passwd"),
]


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(("case", "args", "env", "status", "names"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_ends_in_one_line_naming_it(case, args, env, status, names, home: Path) -> None:
    tmp = str(home.parent)
    done = karma([a.replace("{tmp}", tmp) for a in args], home, env)
    line = one_line(done)
    assert done.returncode == status, (done.returncode, line)
    assert line.startswith("karma"), line
    assert names.replace("{tmp}", tmp) in line, line


def test_debug_shows_the_traceback_and_the_same_line(home: Path) -> None:
    args = ["status", "--data-dir", str(home.parent / "a-file")]
    plain = karma(args, home)
    debug = karma(["--debug", *args], home)
    assert debug.returncode == plain.returncode == 2
    assert "Traceback" in debug.stderr and "Traceback" not in plain.stderr
    assert debug.stderr.strip().splitlines()[-1] == one_line(plain)


def _mount_tmpfs(where: Path, options: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def test_status_on_a_full_disk_and_a_read_only_one_says_so_in_one_line(home: Path) -> None:
    disk = home.parent / "disk"
    if not _mount_tmpfs(disk, "size=1M"):
        pytest.skip("needs root and tmpfs to make a small disk")
    try:
        data = disk / "data"
        assert karma(["status", "--data-dir", str(data)], home).returncode == 0  # the stores exist, then the disk fills
        with open(disk / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 65536)

        done = karma(["status", "--data-dir", str(data)], home)
        line = one_line(done)
        assert done.returncode in (0, 1), line
        if done.returncode == 1:
            assert f"disk full at {data}" in line, line
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    read_only = home.parent / "read-only"
    assert _mount_tmpfs(read_only, "ro,size=1M")
    try:
        done = karma(["status", "--data-dir", str(read_only / "data")], home)
        line = one_line(done)
        assert done.returncode == 1 and str(read_only / "data") in line and "Read-only" in line, line
    finally:
        subprocess.run(["umount", str(read_only)], check=False)
