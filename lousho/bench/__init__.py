"""bench: benchmarks that ship with lousho and run anywhere it is installed (`lousho bench ...`).

The timing scripts of the parts stay in the repository's ``benchmarks/perf/``.
"""
