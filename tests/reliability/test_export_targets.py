"""Issue 26 item 1: no command deletes what it did not write.

`karma export --out DIR` used to replace whatever DIR held (exit 0): with --out set to the data dir it wiped the
KG, catalog, stage tables, index and review queue. Now an export writes only into a new or empty folder or one that
holds nothing but an earlier export of the same format (its export-report.json says so and lists every file); the
data dir, every folder that contains it, $DAGSTER_HOME, the inbox, the checkout, home and / are never targets, and
a symlink or `..` to them is seen through. Refused: exit 2, one line `karma export: ...` naming the folder, and
every file left as it was. The same rule guards the export assets (their default folder) and the seed-subset
writer (kg/subset.py --out).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import dagster as dg
import pytest

from karma_dagster.export import cli_export
from karma_dagster.kg.seed_import import import_hetionet
from karma_dagster.kg.store import KGStore
from karma_dagster.runtime.paths import DataPaths, project_root
from karma_dagster.resources.storage import KarmaStorageResource

SEED = Path(__file__).resolve().parents[2] / "data" / "seed_kg"
DAY = "2016-01-06"


def _tree(root: Path) -> dict[str, str]:
    """Every file under root (links not followed) -> its content digest; folders as 'dir'."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            p = Path(dirpath, f)
            out[os.path.relpath(p, root)] = "link" if p.is_symlink() else hashlib.sha1(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def seed_kg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "kg.duckdb"
    import_hetionet(KGStore(path), SEED / "nodes.tsv", SEED / "edges.sif.gz", seed_confidence=0.9)
    return path


@pytest.fixture
def home(tmp_path: Path, seed_kg: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A deployment in tmp_path: $DAGSTER_HOME with Dagster's files, its data dir with the KG and stand-ins of the
    other stores (catalog, stage tables, index, review queue), an inbox with a paper, $HOME with a file."""
    dh = tmp_path / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(dh))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KARMA_KG_URL", raising=False)
    monkeypatch.delenv("KARMA_STORAGE_URL", raising=False)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    (dh / "storage").mkdir(parents=True)
    (dh / "dagster.yaml").write_text("telemetry: {enabled: false}\n")
    data = dh / "karma"
    data.mkdir()
    (data / "kg.duckdb").write_bytes(seed_kg.read_bytes())
    (data / "catalog.sqlite").write_bytes(b"catalog")
    for sub, name in (("stages/local/entities", "2016-01-05_a.parquet"), ("entity_index.lance/data", "0.lance"),
                      ("review", "queue.sqlite")):
        (data / sub).mkdir(parents=True)
        (data / sub / name).write_bytes(b"store bytes")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "2016-01-05_paper.txt").write_text("Published: 2016-01-05\n\nA paper.\n")
    return {"tmp": tmp_path, "dh": dh, "data": data, "inbox": inbox, "home": tmp_path / "home"}


def _export(capsys: pytest.CaptureFixture, data: Path, out: Path | str | None, fmt: str = "kgx") -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="karma")
    cli_export.add_parser(parser.add_subparsers(dest="command", required=True))
    argv = ["export", "--format", fmt, "--as-of", DAY, "--data-dir", str(data)] + (["--out", str(out)] if out else [])
    capsys.readouterr()
    args = parser.parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().err


def _refused(code: int, err: str, named: str) -> None:
    assert code == 2, err
    assert err.startswith("karma export: --out ") and err.count("\n") == 1, err  # one line
    assert named in err, err


def test_the_data_dir_its_parents_and_links_to_them_are_refused(home: dict, capsys: pytest.CaptureFixture) -> None:
    data, tmp = home["data"], home["tmp"]
    before = _tree(tmp)
    link = tmp / "innocent-looking"
    link.symlink_to(data, target_is_directory=True)
    for out in (data, data.parent, tmp, f"{data}/../karma", link, f"{link}/", data / "." / ""):
        code, err = _export(capsys, data, out)
        _refused(code, err, str(out).rstrip("/") if out != data / "." / "" else str(data))
        assert "is or contains the data dir" in err, err
    link.unlink()
    assert _tree(tmp) == before  # nothing touched, not a temporary folder left behind


def test_folders_holding_what_no_export_wrote_are_refused(home: dict, capsys: pytest.CaptureFixture) -> None:
    data, tmp = home["data"], home["tmp"]
    mine = tmp / "my-folder"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    code, err = _export(capsys, data, mine)
    _refused(code, err, str(mine))
    assert "'thesis.tex'" in err and "nothing was changed" in err
    # an earlier export of another format is not this format's to replace
    assert _export(capsys, data, tmp / "ttl", fmt="turtle")[0] == 0
    code, err = _export(capsys, data, tmp / "ttl", fmt="kgx")
    _refused(code, err, "'turtle' export, not a kgx one")
    # an earlier kgx export with a file of the user's beside it
    assert _export(capsys, data, tmp / "kgx")[0] == 0
    (tmp / "kgx" / "README.md").write_text("my notes on this export")
    code, err = _export(capsys, data, tmp / "kgx")
    _refused(code, err, "'README.md' beside the earlier kgx export")
    # a report file faked into a folder does not make the rest of it an export's
    (mine / "export-report.json").write_text(json.dumps({"format": "kgx", "files": ["nodes.tsv"]}))
    _refused(*_export(capsys, data, mine), "'thesis.tex'")
    (tmp / "garbled").mkdir()
    (tmp / "garbled" / "export-report.json").write_bytes(b"\xff\xfe not json")
    _refused(*_export(capsys, data, tmp / "garbled"), "unreadable")
    # a listed name that is a folder would be emptied: refused too
    (tmp / "kgx" / "README.md").unlink()
    (tmp / "kgx" / "nodes.tsv").unlink()
    (tmp / "kgx" / "nodes.tsv").mkdir()
    (tmp / "kgx" / "nodes.tsv" / "keep.txt").write_text("keep")
    _refused(*_export(capsys, data, tmp / "kgx"), "'nodes.tsv'")
    (tmp / "a-file").write_text("not a folder")
    _refused(*_export(capsys, data, tmp / "a-file"), "not a folder")
    assert (mine / "thesis.tex").read_text() == "years of work"
    assert (tmp / "kgx" / "nodes.tsv" / "keep.txt").read_text() == "keep"
    assert (tmp / "a-file").read_text() == "not a folder"


def test_dagster_home_the_stores_and_home_are_refused(home: dict, capsys: pytest.CaptureFixture) -> None:
    data, dh = home["data"], home["dh"]
    before = _tree(home["tmp"])
    for out, why in ((dh, "data dir"), (dh / "storage" / "exports", "DAGSTER_HOME"), (dh / "new", "DAGSTER_HOME"),
                     (data / "stages" / "out", "store"), (data / "entity_index.lance", "store"),
                     (data / "stages" / "local", "store"), (home["home"], "the home folder")):
        code, err = _export(capsys, data, out)
        _refused(code, err, str(out))
        assert why in err, err
    assert _tree(home["tmp"]) == before


def test_the_checkout_the_inbox_and_root_are_never_targets(home: dict) -> None:
    """Checked on the rule itself (running an export at the checkout or / on the old code would wipe them)."""
    from karma_dagster.kg.safe_output import TargetRefused, check_output_folder

    data = DataPaths(home["data"], home["inbox"])
    for out in (project_root(), project_root() / "karma_dagster" / "..", home["inbox"], "/", home["tmp"] / "..",
                Path("~")):
        with pytest.raises(TargetRefused, match="is or contains"):
            check_output_folder(out, kind="kgx", data=data, report="export-report.json")
    assert check_output_folder(home["inbox"].parent / "fresh", kind="kgx", data=data) == home["tmp"] / "fresh"


def test_new_empty_and_earlier_export_folders_are_written(home: dict, capsys: pytest.CaptureFixture) -> None:
    data, tmp = home["data"], home["tmp"]
    stores = _tree(data)
    assert _export(capsys, data, tmp / "new" / "deeper")[0] == 0
    (tmp / "empty").mkdir()
    assert _export(capsys, data, tmp / "empty")[0] == 0
    # a folder of the user's that happens to have the name the old code used for the previous export: untouched
    (tmp / ".empty.old").mkdir()
    (tmp / ".empty.old" / "keep.txt").write_text("mine")
    assert _export(capsys, data, tmp / "empty")[0] == 0
    assert (tmp / ".empty.old" / "keep.txt").read_text() == "mine"
    report = json.loads((tmp / "empty" / "export-report.json").read_text())
    assert sorted(os.listdir(tmp / "empty")) == sorted(report["files"])
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith(".")) == [".empty.old"]  # no leftovers
    # the default folder inside the data dir, twice (the second replaces the first)
    for _ in range(2):
        assert _export(capsys, data, None)[0] == 0
    assert (data / "exports" / "local" / "kgx" / DAY / "nodes.tsv").is_file()
    after = _tree(data)
    assert {k: v for k, v in after.items() if not k.startswith("exports") and not k.endswith(".lock")} == stores


def test_the_export_asset_refuses_a_default_folder_holding_other_files(home: dict) -> None:
    from karma_dagster.assets.exports import EXPORT_PARTITIONS, export_assets

    storage = KarmaStorageResource(data_dir=str(home["data"]))
    folder = home["data"] / "exports" / "local" / "kgx" / DAY
    folder.mkdir(parents=True)
    (folder / "hand-made.tsv").write_text("someone's edits")
    kgx_asset = export_assets(["local"])[1]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(EXPORT_PARTITIONS.name, [DAY])
        res = dg.materialize([kgx_asset], partition_key=DAY, resources={"storage": storage}, instance=instance,
                             raise_on_error=False)
    assert not res.success
    failure = next(e for e in res.all_events if e.is_step_failure)
    assert "'hand-made.tsv'" in str(failure.step_failure_data.error.message) + str(
        failure.step_failure_data.user_failure_data)
    assert sorted(os.listdir(folder)) == ["hand-made.tsv"]
    assert (folder / "hand-made.tsv").read_text() == "someone's edits"


def test_the_seed_subset_writer_obeys_the_same_rule(home: dict) -> None:
    from karma_dagster.kg.safe_output import TargetRefused
    from karma_dagster.kg.subset import main as subset_main, write_subset

    nodes, edges = [{"id": "Gene::1", "name": "A1BG", "kind": "Gene"}], [("Gene::1", "GiG", "Gene::1")]
    before = _tree(home["tmp"])
    for out in (home["dh"], home["data"].parent.parent, home["home"]):
        with pytest.raises(TargetRefused):
            write_subset(out, nodes, edges)
    assert _tree(home["tmp"]) == before
    odd = home["tmp"] / "odd"
    (odd / "nodes.tsv").mkdir(parents=True)  # a folder where the file would go
    with pytest.raises(TargetRefused, match="'nodes.tsv'"):
        write_subset(odd, nodes, edges)
    with pytest.raises(SystemExit) as stop:
        subset_main(["--hetionet", str(SEED), "--out", str(home["dh"])])
    assert stop.value.code == 2
    kept = home["tmp"] / "seed_kg"
    kept.mkdir()
    (kept / "SOURCE.txt").write_text("where it came from")
    write_subset(kept, nodes, edges)  # its own two files, the rest left alone
    assert sorted(os.listdir(kept)) == ["SOURCE.txt", "edges.sif.gz", "nodes.tsv"]
    assert (kept / "SOURCE.txt").read_text() == "where it came from"


@pytest.mark.parametrize("iri", ["not an iri", "http://ex.org/a b/", "javascript:alert(1)", 'http://ex.org/"><x/',
                                 "https://ex.org/kg?x=1", "ftp://ex.org/kg/", "https:///no-host/", "http://ex.org/\x1b[2J/"])
def test_a_bad_base_iri_is_one_line_before_anything_is_read(home: dict, capsys: pytest.CaptureFixture,
                                                            iri: str) -> None:
    """rdflib used to warn once per triple (250,000 lines on the sample KG) and then fail half-way, exit 1 as an
    unexpected error; 'javascript:alert(1)' was written as the base of every IRI."""
    out = home["tmp"] / "ttl"
    parser = argparse.ArgumentParser(prog="karma")
    cli_export.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["export", "--format", "turtle", "--as-of", DAY, "--data-dir", str(home["data"]),
                              "--out", str(out), "--base-iri", iri])
    capsys.readouterr()
    code = args.func(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("karma export: --base-iri ") and err.count("\n") == 1, err
    assert not out.exists()


def test_a_good_base_iri_is_the_base_of_every_iri(home: dict, capsys: pytest.CaptureFixture) -> None:
    out = home["tmp"] / "ttl"
    parser = argparse.ArgumentParser(prog="karma")
    cli_export.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["export", "--format", "turtle", "--as-of", DAY, "--data-dir", str(home["data"]),
                              "--out", str(out), "--base-iri", "https://kg.example.org/karma#"])
    assert args.func(args) == 0, capsys.readouterr().err
    assert "https://kg.example.org/karma#" in (out / "kg.ttl").read_text(encoding="utf-8")[:5000]
