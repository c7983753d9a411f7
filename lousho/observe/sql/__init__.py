"""sql: the read-only SQL API: the statement guard, its executor, and the JSON and CSV answers."""
