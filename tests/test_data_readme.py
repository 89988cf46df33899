"""data/README.md keeps the list of training abstracts removed for the dev splits (issue 15): it must stay the
same list as data/training_exclusions.tsv, which the corpora's deduplication writes."""

import re
from collections import defaultdict

from karma_dagster.backbones.local.training_data import read_exclusions
from karma_dagster.runtime.paths import data_file


def _readme_rows() -> dict[tuple[str, str], set[str]]:
    rows: dict[tuple[str, str], set[str]] = {}
    for line in data_file("README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| (\S+\.pubtator\.gz) \| (\S+) \| (\d+) \| ([\d, ]+) \|$", line)
        if m:
            pmids = {p.strip() for p in m.group(4).split(",")}
            assert len(pmids) == int(m.group(3)), f"data/README.md: row {m.group(1)}/{m.group(2)} miscounts its PMIDs"
            rows[(m.group(1), m.group(2))] = pmids
    return rows


def test_the_data_readme_lists_exactly_the_removed_training_abstracts():
    expected: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in read_exclusions():
        expected[(r.training_corpus, r.dev_split)].add(r.pmid)
    listed = _readme_rows()
    assert listed == dict(expected)
    total = sum(len(v) for v in expected.values())
    assert f"{total} PMIDs removed" in data_file("README.md").read_text(encoding="utf-8")
