"""The two partition axes, split on measurement (STACK.md).

A date x document multi-partition is a cross product that every backfill enumerates (37-40 s and 3-6 GB to
launch at 1,000 papers, out of memory at 10,000), so agent stages are partitioned by `document` alone and
the KG increment by `date`; a document feeds the increment of the date its key starts with
(`ingest.keys.date_of_document_key`).
"""

from __future__ import annotations

import dagster as dg

DOCUMENTS = "documents"
KG_START_DATE = "1990-01-01"

documents_partitions = dg.DynamicPartitionsDefinition(name=DOCUMENTS)
# end_offset=1: today's increment exists already (arrival-dated documents land there).
dates_partitions = dg.DailyPartitionsDefinition(start_date=KG_START_DATE, end_offset=1)
