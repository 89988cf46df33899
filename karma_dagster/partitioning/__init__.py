"""How work is cut into Dagster partitions: the two dynamic axes (definitions.py) and where documents stand in
the partition order, read without loading every partition (order.py)."""
