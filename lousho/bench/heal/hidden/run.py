"""The hidden tests of the heal benchmark's tasks; the agent never sees this file.

Run as ``python -I -S run.py PROJECT_DIR TASK_ID`` against one run's copy of the project: it imports
``calc`` from PROJECT_DIR, runs the task's checks and prints one JSON object, ``{"ok": true}`` or
``{"ok": false, "explanation": ...}``. A separate process, so code a model wrote can neither touch the
benchmark's memory nor hang it (the caller sets a timeout). Standard library only (``-S``).
"""

from __future__ import annotations

import json
import sys
from datetime import date
from decimal import Decimal


def add_months(m):
    dates = m.dates
    cases = [((date(2024, 1, 31), 1), date(2024, 2, 29)), ((date(2023, 1, 31), 1), date(2023, 2, 28)),
             ((date(2024, 3, 31), 1), date(2024, 4, 30)), ((date(2024, 1, 30), 2), date(2024, 3, 30)),
             ((date(2024, 5, 15), 1), date(2024, 6, 15)), ((date(2024, 12, 31), 2), date(2025, 2, 28)),
             ((date(2024, 3, 31), -1), date(2024, 2, 29))]
    for args, expected in cases:
        _equal(f"add_months{args}", lambda a=args: dates.add_months(*a), expected)


def is_leap_year(m):
    for year, expected in ((2024, True), (2023, False), (1900, False), (2000, True), (2100, False)):
        _equal(f"is_leap_year({year})", lambda y=year: m.dates.is_leap_year(y), expected)


def invoice_rounding(m):
    cases = [([("0.125", 1)], Decimal("0.13")), ([("1.005", 1)], Decimal("1.01")),
             ([("19.99", 3), ("0.01", 1)], Decimal("59.98")), ([("0.335", 3)], Decimal("1.01")),
             ([("2.50", 2), ("1.00", 1)], Decimal("6.00"))]
    for lines, expected in cases:
        got = _equal(f"invoice_total({lines})", lambda x=lines: m.money.invoice_total(x), expected)
        assert isinstance(got, Decimal), f"invoice_total({lines}) returned {type(got).__name__}, not Decimal"
        assert str(got) == str(expected), f"invoice_total({lines}) printed {got}, expected {expected}"


def percent_change(m):
    for args, expected in (((10.0, 15.0), 50.0), ((20.0, 10.0), -50.0), ((4.0, 4.0), 0.0)):
        _close(f"percent_change{args}", lambda a=args: m.money.percent_change(*a), expected)


def slugify(m):
    for text, expected in (("Hello, World!", "hello-world"), ("  spaced   out  ", "spaced-out"),
                           ("Q3 report (final)", "q3-report-final"), ("a--b", "a-b")):
        _equal(f"slugify({text!r})", lambda t=text: m.text.slugify(t), expected)


def word_count(m):
    for text, expected in (("one two  three", 3), ("  lead and trail  ", 3), ("line\nbreak\tand tab", 4),
                           ("", 0)):
        _equal(f"word_count({text!r})", lambda t=text: m.text.word_count(t), expected)


def title_case(m):
    for text, expected in (("don't stop", "Don't Stop"), ("hello world", "Hello World"),
                           ("the USA office", "The USA Office")):
        _equal(f"title_case({text!r})", lambda t=text: m.text.title_case(t), expected)


def clamp(m):
    for args, expected in (((5, 0, 10), 5), ((-3, 0, 10), 0), ((12, 0, 10), 10), ((0.5, 0.0, 1.0), 0.5)):
        _equal(f"clamp{args}", lambda a=args: m.numbers.clamp(*a), expected)


def median(m):
    for values, expected in (([3, 1, 2], 2), ([4, 1, 3, 2], 2.5), ([7], 7), ([1, 1, 5, 9], 3.0)):
        _equal(f"median({values})", lambda v=values: m.numbers.median(list(v)), expected)


def parse_duration(m):
    for text, expected in (("1h30m", 5400), ("45s", 45), ("2m5s", 125), ("1h1s", 3601)):
        _equal(f"parse_duration({text!r})", lambda t=text: m.durations.parse_duration(t), expected)


def chunk(m):
    for args, expected in ((([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]), (([1, 2], 3), [[1, 2]]),
                           (([], 2), []), (([1, 2, 3, 4], 2), [[1, 2], [3, 4]])):
        _equal(f"chunk{args}", lambda a=args: m.lists.chunk(list(a[0]), a[1]), expected)


def _equal(what, call, expected):
    got = _call(what, call)
    assert got == expected, f"{what} returned {got!r}, expected {expected!r}"
    return got


def _close(what, call, expected):
    got = _call(what, call)
    ok = isinstance(got, int | float) and abs(got - expected) < 1e-9
    assert ok, f"{what} returned {got!r}, expected {expected!r}"


def _call(what, call):
    try:
        return call()
    except Exception as e:  # the model's code raising is a failed check, described for the record
        raise AssertionError(f"{what} raised {type(e).__name__}: {e}") from None


class _Modules:
    """``m.dates`` imports ``calc.dates`` on first use, so a broken module fails only its own tasks."""

    def __getattr__(self, name):
        import importlib

        return importlib.import_module(f"calc.{name}")


def main(argv):
    project, task = argv[1], argv[2]
    sys.path.insert(0, project)
    sys.dont_write_bytecode = True
    check = globals().get(task.replace("-", "_"))
    if check is None:
        print(json.dumps({"ok": False, "explanation": f"no hidden tests for task {task!r}"}))
        return 2
    try:
        check(_Modules())
    except AssertionError as e:
        print(json.dumps({"ok": False, "explanation": str(e)[:500]}))
        return 0
    except Exception as e:  # importing the model's module failed: a failed check, described
        print(json.dumps({"ok": False, "explanation": f"{type(e).__name__}: {e}"[:500]}))
        return 0
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
