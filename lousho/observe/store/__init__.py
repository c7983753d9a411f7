"""store: the DuckDB span store: schema and migrations, the single writer, recent keys, compaction and damage checks."""
