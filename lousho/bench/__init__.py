"""bench: benchmarks that ship with the package."""
