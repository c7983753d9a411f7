"""analysis: runs and cases as Polars frames, statistics with exact operating characteristics."""
