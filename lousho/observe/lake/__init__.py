"""lake: the fleet's shared store, DuckLake (Postgres catalog, Parquet data), written and read by its own process."""
