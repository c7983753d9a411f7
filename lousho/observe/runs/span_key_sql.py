"""``span_key`` in SQL that DuckDB hashes (GROUP BY, DISTINCT, joins, IN, PARTITION BY): as its two 64-bit halves.

DuckDB hashes a UHUGEINT as hash(upper) XOR hash(lower), so every key whose halves are equal hashes to 0. A span
key is the span id over the low half of the trace id (schema.py), and the two are equal for the root span of every
trace begun with a 64-bit id (Zipkin's B3 gives a root span the trace's id; in OTLP's 128 bits its high half is
zero), as for any body made so on purpose. Hashed as one column, such keys share one bucket and the work grows with
the square of their number (40,000 of them: 11.5 s for one ``IN``, 3.4 s for one ``count(DISTINCT)``). Two UBIGINT
columns hash through DuckDB's combine (a multiply, then an xor), which equal halves do not defeat.
"""

from __future__ import annotations

LOW_64 = (1 << 64) - 1


def hi(column: str = "span_key") -> str:
    return f"({column} >> 64)::UBIGINT"


def lo(column: str = "span_key") -> str:
    return f"({column} & {LOW_64})::UBIGINT"


def halves(column: str = "span_key") -> str:
    """The key as two columns, for a GROUP BY, DISTINCT ON or PARTITION BY list."""
    return f"{hi(column)}, {lo(column)}"


def same(left: str, right: str) -> str:
    """A join condition: the keys ``left`` and ``right`` are equal."""
    return f"{hi(left)} = {hi(right)} AND {lo(left)} = {lo(right)}"
