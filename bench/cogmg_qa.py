"""CogMG's QA benchmark on a grown KG, per backbone: hit rate before completion, after completion (unreviewed) and
after review, where the review accepts exactly the completions verification supported (a reviewer who trusts the
verifier; the `qa_benchmark` asset reads real decisions from the review queue instead).

    python bench/cogmg_qa.py --data-dir DAGSTER_HOME/karma [--backbone local --backbone local-single]

Run it after `karma run` (the KG and the stage tables it grew); offline backbones only (`local` kind).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from karma_dagster.cogmg.benchmark import evaluate_set, markdown  # noqa: E402
from karma_dagster.cogmg.questions import load_all  # noqa: E402
from karma_dagster.runtime.config import BackboneSettings  # noqa: E402
from karma_dagster.runtime.paths import DataPaths  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True, help="the data dir a `karma run` grew ($DAGSTER_HOME/karma)")
    ap.add_argument("--backbone", action="append", help="a local-kind backbone (repeatable; default: local)")
    args = ap.parse_args(argv)
    data = DataPaths(args.data_dir)
    if not data.kg.exists():
        raise SystemExit(f"no KG in {args.data_dir}: run `karma run` first")
    rows = []
    for qs in load_all():
        for ns in args.backbone or ["local"]:
            t0 = time.perf_counter()
            row, _answers, _completions = evaluate_set(qs.questions, qs.key, backbone=ns, settings=BackboneSettings(),
                                                       data=data)
            rows.append(row)
            print(f"{ns} / {qs.key}: {len(qs.questions)} questions in {time.perf_counter() - t0:.0f} s", flush=True)
    print("\n" + markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
