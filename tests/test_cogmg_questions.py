"""CogMG question sets: the shipped file, the loader's errors, the questions sensor, the cue lexicon vs the schema."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from karma_dagster.cogmg.cues import ANSWER_KIND_CUES, RELATION_CUES, answer_kinds, relation_cues
from karma_dagster.cogmg.questions import QuestionFileError, load_all, load_set, split_key
from karma_dagster.kg.schema import KGSchema
from karma_dagster.metrics.qa import load_questions

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "data" / "questions" / "sample_biomed.v1.yaml"


def test_the_shipped_set_keeps_the_76_questions_and_their_papers():
    qs = load_set(SHIPPED)
    v2 = load_questions()  # the QA-coherence set it was seeded from
    assert qs.key == "sample_biomed.v1" and len(qs.questions) == 76 >= 50
    assert {q.id: (q.question, q.source, q.answers) for q in qs.questions} == {
        q.id: (q.question, q.source, q.plausible) for q in v2.questions}
    keys = qs.partition_keys()
    assert len(set(keys)) == 76 and split_key(keys[0]) == ("sample_biomed.v1", qs.questions[0].id)
    assert [s.key for s in load_all()] == ["sample_biomed.v1"]


def _write(folder: Path, name: str, data) -> Path:  # noqa: ANN001
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


GOOD = {"version": 1, "questions": [{"id": "q-one", "question": "Which drugs cause thrombocytopenia?",
                                     "answers": ["Heparin"], "source": "PMC4738914.pdf"}]}


@pytest.mark.parametrize("name,data,problem", [
    ("Bad Name.v1.yaml", GOOD, "name must be <set>.v<N>.yaml"),
    ("s.v1.yaml", "version: 1\nquestions: [unclosed", "cannot be read as YAML"),
    ("s.v2.yaml", GOOD, "says version 1, its name v2"),
    ("s.v1.yaml", {"version": 1, "questions": [{"id": "q", "question": "Which drugs cause it?", "source": "x"}]},
     "questions.0.answers: Field required"),
    ("s.v1.yaml", {"version": 1, "questions": [GOOD["questions"][0], GOOD["questions"][0]]}, "repeats question ids"),
    ("s.v1.yaml", {"version": 1, "questions": [{**GOOD["questions"][0], "id": "Has Space"}]}, "question id"),
    ("s.v1.yaml", {"version": 1, "questions": [{**GOOD["questions"][0], "colour": "red"}]}, "Extra inputs"),
    ("s.v1.yaml", {"version": 1, "questions": []}, "has no questions"),
])
def test_a_bad_file_is_refused_naming_the_file_and_the_problem(tmp_path, name, data, problem):
    path = _write(tmp_path, name, data)
    with pytest.raises(QuestionFileError) as err:
        load_set(path)
    assert path.name in str(err.value) and problem in str(err.value)


def test_the_sensor_registers_new_sets_refuses_edited_and_bad_files(tmp_path):
    from karma_dagster.sensors.questions import build_questions_sensor

    folder = tmp_path / "questions"
    folder.mkdir()
    shutil.copy(SHIPPED, folder / SHIPPED.name)
    sensor = build_questions_sensor(folder)
    with dg.instance_for_test() as instance:
        result = sensor(dg.build_sensor_context(instance=instance))
        added = result.dynamic_partitions_requests[0]
        assert added.partitions_def_name == "questions" and len(added.partition_keys) == 76
        instance.add_dynamic_partitions("questions", list(added.partition_keys))
        cursor = result.cursor
        # nothing new: a skip, cursor kept
        again = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
        assert isinstance(again, dg.SkipReason)
        # an edited registered set is refused (a changed set is a new file); a bad file is skipped; a new one added
        (folder / SHIPPED.name).write_text(SHIPPED.read_text() + "\n# edited\n")
        _write(folder, "broken.v1.yaml", "version: 1\nquestions: [")
        _write(folder, "extra.v1.yaml", GOOD)
        third = sensor(dg.build_sensor_context(instance=instance, cursor=cursor))
        assert list(third.dynamic_partitions_requests[0].partition_keys) == ["extra.v1__q-one"]
        assert len(instance.get_dynamic_partitions("questions")) == 76  # the edited set's partitions untouched


def test_the_cue_lexicon_names_only_schema_relations_and_kinds():
    schema = KGSchema.load()
    assert {r for _p, rels in RELATION_CUES for r in rels} <= set(schema.relation_names)
    assert {k for _p, kinds in ANSWER_KIND_CUES for k in kinds} <= set(schema.node_kinds)
    assert ("cause", "causes") in relation_cues("Which drugs can cause thrombocytopenia?")
    assert answer_kinds("Which drugs can cause thrombocytopenia?") == ["Compound"]
    assert answer_kinds("Which receptor does tamoxifen antagonise?") == ["Gene"]
