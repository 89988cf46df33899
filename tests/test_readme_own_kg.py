"""The README's "your own KG and your own papers" works as written: its example KG and paper, and its commands, are
read from the README itself and run on a fresh project with two more abstracts, and the KG grows from those papers
with provenance. Edit the README's commands or example and this test runs the edited ones."""

from __future__ import annotations

import csv
import glob
import re
import shlex
import shutil
from pathlib import Path

import duckdb
import pytest

from karma_dagster import cli
from karma_dagster.project.discover import ENV

REPO = Path(__file__).resolve().parent.parent
SECTION = "## Your own KG and your own papers"

# Two more abstracts beside the README's example paper: three papers over two publication dates.
MORE_PAPERS = {
    "tamoxifen.txt": """Title: Tamoxifen and ESR1 in estrogen receptor-positive breast cancer
PMID: 90000001
Published: 2024-03-04

Tamoxifen is the standard endocrine therapy for estrogen receptor alpha (ESR1)-positive breast cancer. Tamoxifen
binds ESR1 and blocks estrogen signalling in breast cancer cells. In a cohort of 412 women with breast cancer,
tamoxifen treatment reduced recurrence of breast cancer by 39%. Mutations in ESR1 are associated with acquired
resistance to tamoxifen in metastatic breast cancer.
""",
    "fulvestrant.txt": """Title: Fulvestrant degrades ESR1 in tamoxifen-resistant breast cancer
PMID: 90000003
Published: 2024-03-05

Fulvestrant is a selective estrogen receptor degrader that binds ESR1 and induces its degradation. In patients with
advanced breast cancer that progressed on tamoxifen, fulvestrant treatment prolonged progression-free survival.
Fulvestrant downregulated ESR1 protein expression in breast cancer cells.
""",
}


def readme_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def fenced_blocks(section: str) -> list[tuple[str, str, str]]:
    """(language, body, the prose just before it) of each fenced block of the section."""
    blocks = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", section, re.MULTILINE | re.DOTALL):
        prose = section[:m.start()].rstrip().rsplit("\n\n", 1)[-1]
        blocks.append((m.group(1), m.group(2), prose))
    return blocks


def example_files(section: str) -> dict[str, str]:
    """The example files the section shows: each non-shell block under prose naming a `relative/path`."""
    files = {}
    for lang, body, prose in fenced_blocks(section):
        if lang in ("bash", "sh", "console"):
            continue
        named = re.findall(r"`([\w.-]+/[\w./-]+\.\w+)`", prose)
        assert named, f"an example block ({lang}) with no `path` named before it: {prose!r}"
        files[named[-1]] = body
    return files


def commands(section: str) -> list[list[str]]:
    """The section's shell block, one argv per command (`&&` splits a line, `#` starts a comment)."""
    (body,) = [body for lang, body, _ in fenced_blocks(section) if lang == "bash"]
    argvs = []
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            argvs.append(words[:cut])
            words = words[cut + 1:]
    return argvs


def test_the_readme_section_has_five_commands_and_its_example_kg_and_paper():
    section = readme_section()
    argvs = commands(section)
    assert len(argvs) <= 6 and [a[0] for a in argvs].count("karma") >= 3, argvs
    files = example_files(section)
    assert {"my_kg/nodes.tsv", "my_kg/edges.tsv"} <= set(files), sorted(files)
    assert files["my_kg/nodes.tsv"].startswith("id\tname\tkind"), "the generic format's header, tab-separated"


@pytest.fixture
def own_folder(tmp_path, monkeypatch, shared_cache):
    """A user's folder: the README's example KG and paper, two more abstracts; no project or DAGSTER_HOME around."""
    for name in (ENV, "DAGSTER_HOME"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    for rel, body in example_files(readme_section()).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body, encoding="utf-8")
    for name, body in MORE_PAPERS.items():
        (tmp_path / "my_papers" / name).write_text(body, encoding="utf-8")
    assert len(list((tmp_path / "my_papers").iterdir())) == 3
    return tmp_path


def run_readme_commands(argvs: list[list[str]], shared_cache: Path, monkeypatch) -> Path:
    """Run them as a shell would, `karma` in this process; returns the project folder (where `cd` went)."""
    here = Path.cwd()
    for argv in argvs:
        name, args = argv[0], argv[1:]
        if name == "cd":
            here = (here / args[0]).resolve()
            monkeypatch.chdir(here)
        elif name == "cp":
            *sources, dest = args
            found = [p for s in sources for p in sorted(glob.glob(str(here / s)))]
            assert found, f"`{shlex.join(argv)}` copies nothing"
            for src in found:
                shutil.copy(src, here / dest)
        elif name == "karma":
            assert cli.main(args) == 0, f"`{shlex.join(argv)}` failed"
            if args[0] == "init":  # the derived caches (lexicon, relation model) shared, as conftest does
                data = (here / args[-1] / "dagster_home" / "karma")
                data.mkdir(parents=True, exist_ok=True)
                (data / "cache").symlink_to(shared_cache, target_is_directory=True)
        else:
            pytest.fail(f"the README's command `{shlex.join(argv)}`: this test runs karma, cd and cp; teach it {name}")
    return here


def test_the_readmes_own_kg_commands_grow_the_users_kg_from_their_papers(own_folder, shared_cache, monkeypatch,
                                                                          capsys):
    project = run_readme_commands(commands(readme_section()), shared_cache, monkeypatch)
    out = capsys.readouterr().out
    assert "backbones: backbones.yaml of project 'mylab'" in out, "the project folder's own settings"
    assert "3 new or changed documents" in out

    kg = project / "dagster_home" / "karma" / "kg.duckdb"
    with duckdb.connect(str(kg), read_only=True) as con:
        seed = dict(con.execute("SELECT id, name FROM seed_nodes").fetchall())
        evidence = con.execute("SELECT doc_key, head_id, relation, tail_id, evidence, backbone, prompt_version "
                               "FROM evidence WHERE namespace = 'local'").fetchall()
        increments = con.execute("SELECT date, n_new_edges + n_reinforced FROM increments "
                                 "WHERE namespace = 'local' ORDER BY date").fetchall()
    assert set(seed) == {"gene:esr1", "drug:tamoxifen", "disease:breast-cancer", "disease:hypothyroidism",
                         "drug:lithium"}, "the README's KG is the seed"
    papers = {row[0] for row in evidence}
    assert len(papers) >= 2 and all(re.match(r"2024-03-0[45]_pmid-9000000[123]$", k) for k in papers), papers
    assert all(sentence and backbone == "local" and prompt for *_, sentence, backbone, prompt in evidence)
    on_seed = {(h, r, t) for _, h, r, t, *_ in evidence if h in seed and t in seed}
    assert on_seed, "a paper's mention of the user's nodes (ERα, lithium carbonate, ...) lands on those nodes"
    assert [str(d) for d, _ in increments] == ["2024-03-04", "2024-03-05"] and all(n for _, n in increments)

    export = project.parent / "mylab-kgx"
    assert {"edges.tsv", "nodes.tsv"} <= {p.name for p in export.iterdir()}, "the README's export wrote the KG"
    with (export / "edges.tsv").open(encoding="utf-8", newline="") as fh:
        cited = {doc for row in csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
                 for doc in row["karma_documents"].split("|") if doc}
    assert papers <= cited, "every paper that grew the KG is cited by its exported edges"
