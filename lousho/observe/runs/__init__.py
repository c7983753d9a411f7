"""runs: spans into runs and sessions: conventions, normalising, cost, the runs and sessions views, the kept runs
table."""
