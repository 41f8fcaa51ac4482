"""Citations: source notes of site_config.yaml split into text and links to the sources page, and that page's rows.

A note such as "RunPod community cloud [SILY]" is shown as written, with each [KEY] a link to the
key's entry on /sources/ (and its title on hover), so that every citation a page shows is explained
on the site. settings.py has already refused a note citing a key that sources: does not list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import format as f
from ..settings import CITATION_RE, Settings, Source
from . import pages


def anchor(key: str) -> str:
    """The id of a key's entry on the sources page: "SILY" -> "src-SILY"."""
    return f"src-{key}"


def href(site: Mapping[str, Any], root: str | None, standalone: bool) -> str | None:
    """The sources page from a page: relative on the site (root: the way back to the site root),
    absolute from a standalone file, and none where there is no site (no site.url)."""
    if standalone:
        url = pages.site_url(dict(site))
        return url + pages.SOURCES[: -len("index.html")] if url else None
    return None if root is None else root + pages.SOURCES


def note(text: str, sources: Mapping[str, Source], page: str | None) -> list[dict[str, str | None]]:
    """A source note as parts to place: plain text (href None) and citations linking to `page`'s entry
    (page None: the citation stays text, with its title). Empty parts are dropped."""
    parts: list[dict[str, str | None]] = []
    at = 0
    for match in CITATION_RE.finditer(text):
        if match.start() > at:
            parts.append({"text": text[at:match.start()], "href": None, "title": None})
        source = sources.get(match.group(1))
        parts.append({"text": match.group(0), "title": source.title if source else None,
                      "href": None if page is None or source is None else f"{page}#{anchor(source.key)}"})
        at = match.end()
    if at < len(text):
        parts.append({"text": text[at:], "href": None, "title": None})
    return parts


def page_context(settings: Settings) -> dict[str, Any]:
    """The sources page: the priced GPUs and the cards with their notes, then every key explained."""
    here = ""  # citations on the page itself link to its own entries
    sources = settings.sources
    gpus = [{"name": g.name, "price": f.usd_per_hour(g.price_usd_per_hour), "date": g.price_date,
             "price_source": note(g.price_source, sources, here), "spec_source": note(g.spec_source, sources, here)}
            for g in settings.gpus.values()]
    cards = [{"name": c.name, "usable": f.gb(c.memory_usable_bytes), "usable_gib": f.gib(c.memory_usable_bytes),
              "source": note(c.usable_source, sources, here)} for c in settings.cards]
    keys = [{"key": s.key, "anchor": anchor(s.key), "title": s.title, "url": s.url} for s in sources.values()]
    return {"gpus": gpus, "cards": cards, "keys": keys}
