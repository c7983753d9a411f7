"""Pages of a list: the ``page`` parameter, checked, and the links to the page before and after.

Every list the page shows is cut into pages of a fixed size in a stable order (the query's ORDER BY
ends with a unique column), so ``?page=2`` names the same rows on every load while nothing new
arrives. A ``page`` that is not a whole number from 1 is a coded 400, not a silent first page: a
mistyped link should say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lousho.kernel.errors import UsageError
from lousho.page.html import Safe, el, href, join

# Past this no one pages by hand; the bound also keeps OFFSET (rows the store skips) in reason.
MAX_PAGE = 100_000


class BadPageParameter(UsageError):
    code = "LOUSHO_PAGE_BAD_PARAMETER"
    hint = f"page is a whole number from 1 to {MAX_PAGE:,} (1 is the first page); drop it for the first page"


@dataclass(frozen=True)
class Page:
    number: int  # from 1
    size: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size


def page_of(raw: str | None, size: int) -> Page:
    """The page ``raw`` names (absent or empty: the first); raises ``BadPageParameter`` otherwise."""
    if raw is None or raw == "":
        return Page(1, size)
    # Length first: int() refuses strings past 4,300 digits with a ValueError.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not 1 <= int(raw) <= MAX_PAGE:
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise BadPageParameter(f"page={shown!r} is not a page number")
    return Page(int(raw), size)


def pager(path: str, page: Page, has_next: bool, **query: Any) -> Safe:
    """Links to the previous and next page of ``path`` (keeping ``query``), or nothing on a lone page."""
    if page.number == 1 and not has_next:
        return join([])
    links: list[Any] = []
    if page.number > 1:
        links.append(el("a", "← previous",
                        href=href(path, **query, page=page.number - 1 if page.number > 2 else None),
                        rel="prev", id="page-prev"))
    links.append(el("span", f"page {page.number:,}", cls="muted"))
    if has_next:
        links.append(el("a", "next →", href=href(path, **query, page=page.number + 1), rel="next", id="page-next"))
    return el("nav", join(links, " · "), cls="pager")
