"""One module per stage, in flow order: documents -> segments -> summaries -> entities -> relations ->
aligned -> resolved -> evaluated -> knowledge_graph. Assets orchestrate; agents do the work."""
