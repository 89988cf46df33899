"""Sensors: new papers in the inbox start the agent chain; finished documents start their date's KG increment."""
