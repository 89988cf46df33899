"""The `questions` sensor: registers each question of a new question file (data/questions/<set>.v<N>.yaml) as a
`questions` partition. A file that fails validation is skipped with its error; a registered set whose file
changed is refused (a changed set is a new file, like a prompt), its partitions untouched."""

import json
from pathlib import Path

import dagster as dg

from karma_dagster.assets.questions import QUESTIONS, questions_partitions
from karma_dagster.cogmg.questions import QuestionFileError, load_set, question_files


def scan(folder: Path | None, known: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(new partition keys, the cursor's set -> sha256 after this scan, problems to log)."""
    new_keys: list[str] = []
    seen = dict(known)
    problems: list[str] = []
    for path in question_files(folder):
        try:
            qs = load_set(path)
        except QuestionFileError as exc:
            problems.append(str(exc))
            continue
        if qs.key in known and known[qs.key] != qs.sha256:
            problems.append(f"question file {path.name} changed after it was registered: a changed set is a new "
                            f"file ({qs.name}.v{qs.version + 1}.yaml); its registered questions stay as they were")
            continue
        if qs.key not in known:
            new_keys += qs.partition_keys()
            seen[qs.key] = qs.sha256
    return new_keys, seen, problems


def build_questions_sensor(folder: Path | str | None = None, interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(
        name="questions",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Registers the questions of new files under data/questions/ as `questions` partitions.",
    )
    def questions(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        known = json.loads(context.cursor) if context.cursor else {}
        new_keys, seen, problems = scan(Path(folder) if folder else None, known)
        for problem in problems:
            context.log.warning(problem)
        present = set(context.instance.get_dynamic_partitions(QUESTIONS))
        to_add = sorted(set(new_keys) - present)
        if not to_add:
            context.update_cursor(json.dumps(seen, sort_keys=True))
            return dg.SkipReason("no new question file" + (f" ({len(problems)} refused: see the log)" if problems else ""))
        return dg.SensorResult(dynamic_partitions_requests=[questions_partitions.build_add_request(to_add)],
                               cursor=json.dumps(seen, sort_keys=True))

    return questions
