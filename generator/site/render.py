"""Jinja2 rendering: one strict, autoescaping environment, and one function per page kind.

StrictUndefined turns a missing context key into an error (a model whose page cannot be rendered is
listed by the build, never published half-empty); autoescape escapes every string that came from
the Hub. The only strings marked safe are our own stylesheet and the JSON twin with `<`, `>` and
`&` already \\u-escaped, neither of which can close the raw-text element it is placed in.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from .. import format as f
from ..estimator import Report
from ..records import ModelRecord
from ..settings import Settings
from . import accuracy_page, calculator, changes, listing, pages, sources
from .context import config_notice, model_context


def _templates_dir() -> Path:
    """templates/ of the checkout (editable install), else the copy the wheel ships as generator/templates."""
    here = Path(__file__).resolve().parents[2] / "templates"
    return here if here.is_dir() else Path(__file__).resolve().parents[1] / "templates"


TEMPLATES = _templates_dir()


class _Environment(Environment):
    """Jinja with a fast path for `row.key` on the plain dicts our contexts are made of: the base class
    tries the attribute first and so raises and catches AttributeError on every cell of every table
    (a third of an index page's render time). Templates call no dict methods."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    # HTML and XML are escaped; the two plain-text files (robots.txt, llms.txt) hold only validated
    # ids, slugs, URLs and formatted numbers, and must not turn "&" into "&amp;".
    escape = select_autoescape(enabled_extensions=("html", "xml"), disabled_extensions=("txt",), default=True)
    return _Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=escape,
                       trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


@functools.lru_cache(maxsize=1)
def stylesheet() -> str:
    return (TEMPLATES / "static" / "style.css").read_text(encoding="utf-8")


def static_file(rel: str) -> str:
    """A file of templates/static/ (our own scripts), written to public/ as it is."""
    return (TEMPLATES / rel).read_text(encoding="utf-8")


def twin_json(report: Report) -> str:
    """The JSON twin: sorted keys, ASCII only, and no raw `<`, `>`, `&` or `'` (they occur only inside
    strings, where \\u003c is the same value), so it is safe to embed in a page and to serve. Compact
    (no indentation): a third smaller, and written by json's C encoder, which indentation turns off."""
    text = json.dumps(report.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text + "\n"


def _frame(settings: Settings, *, page: str | None, title: str, description: str,
           alternate: str | None = None, search: bool = True, feed: bool = False) -> dict[str, Any]:
    """What base.html needs. page=None renders a self-contained file: CSS inline, absolute links
    (the search box then goes to the public site's search page, when site.url is set)."""
    url = pages.site_url(settings.site)
    site_title = str(settings.site.get("title") or "neurarch-trace")
    css: dict[str, Any]
    if page is None:
        css = {"href": None, "inline": _inline_css()}
        home = url + "index.html" if url else None
        canonical = None
        search_href = url + pages.SEARCH if url and search else None
        feed_href = None
    else:
        root = pages.root_from(page)
        css = {"href": root + pages.STYLESHEET, "inline": None}
        home = root + "index.html"
        folder = page[: -len("index.html")] if page.endswith("index.html") else page
        canonical = url + folder if url else None
        search_href = root + pages.SEARCH if search else None
        feed_href = root + pages.FEED if feed and url else None
    og = None if canonical is None else {"url": canonical, "title": title, "description": description,
                                         "site_name": site_title}
    base = (url if page is None else pages.root_from(page)) if (url or page is not None) else None
    nav = [] if base is None or (page is None and not search) else [
        {"text": text, "href": base + rel} for text, rel in (
            ("Models", pages.HOME), ("Families", pages.FAMILIES_INDEX), ("Cards", pages.CARDS_INDEX),
            ("Changes", pages.CHANGES), ("Accuracy", pages.ACCURACY), ("Sources", pages.SOURCES),
            ("Search", pages.SEARCH))]
    return {"title": title, "description": description, "site_title": site_title, "css": css,
            "home_href": home, "canonical": canonical, "alternate": alternate, "og": og,
            "search_href": search_href, "feed_href": feed_href, "head_style": None, "scripts": [], "nav": nav,
            "install_command": pages.install_command(settings.site)}


def _inline_css() -> Markup:
    css = stylesheet()
    if "</" in css:  # our own file; a closing tag inside <style> would end it early
        raise ValueError("templates/static/style.css must not contain '</'")
    return Markup(css)


def _render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def _crumbs(model_type: str | None, name: str, family_href: str | None, home: str | None) -> list[dict]:
    return [{"text": "Models", "href": home}, {"text": model_type if model_type is not None else "unknown",
                                                "href": family_href}, {"text": name, "href": None}]


def render_model_page(report: Report, record: ModelRecord | None, settings: Settings, *, standalone: bool) -> str:
    """One model page; standalone=True makes it a single self-contained file (CSS inlined, the
    Report embedded as JSON) for `neurarch-trace MODEL --html FILE`. record=None: a local config.

    A site page depends only on its own Report, record and the settings (never on other models):
    that is what lets an incremental build copy it unchanged."""
    name = pages.display_name(report.model.id)
    description = f"GPU memory and cost to fine-tune and serve {report.model.id}, estimated from its config.json."
    title = f"{name}: GPU memory to fine-tune"
    if standalone:
        frame = _frame(settings, page=None, title=title, description=description, search=False)
        crumbs = _crumbs(report.model.model_type, name, None, frame["home_href"])
        embedded = Markup(twin_json(report))
    else:
        if record is None:
            raise ValueError("a site page needs the model's record (its id becomes the page path)")
        page = f"{pages.model_dir(record.id)}/index.html"
        frame = _frame(settings, page=page, title=title, description=description, alternate="index.json")
        slug = pages.family_slug(report.model.model_type)
        family_href = None if slug is None else f"{pages.root_from(page)}{pages.family_dir(slug)}/index.html"
        crumbs = _crumbs(report.model.model_type, name, family_href, frame["home_href"])
        embedded = None
    context = model_context(report, record, settings, crumbs=crumbs, standalone=standalone)
    calc = None if standalone or record is None else calculator.page_context(report, record.config(),
                                                                              pages.root_from(page))
    return _render("model.html", **frame, **context, embedded_json=embedded, calculator=calc)


def render_not_estimated(record: ModelRecord, reason: str, detail: str, settings: Settings) -> str:
    """The honest page of a model the estimator cannot do yet: why, and where the data came from."""
    page = f"{pages.model_dir(record.id)}/index.html"
    name = pages.display_name(record.id)
    frame = _frame(settings, page=page, title=f"{name}: not estimated yet",
                   description=f"{record.id} is not estimated yet: {reason}")
    model_type = listing.config_model_type(record)
    slug = pages.family_slug(model_type)
    family_href = None if slug is None else f"{pages.root_from(page)}{pages.family_dir(slug)}/index.html"
    downloads = None if record.downloads is None else f.short_count(record.downloads)
    return _render("not_estimated.html", **frame, crumbs=_crumbs(model_type, name, family_href, frame["home_href"]),
                   name=name, model_id=record.id, reason=reason, detail=detail, downloads=downloads,
                   hub_url=f"https://huggingface.co/{record.id}", config_source=record.config_source,
                   config_notice=config_notice(record.config_provenance),
                   downloads_source=record.downloads_source, problems=list(record.problems))


def _card_names(settings: Settings) -> list[str]:
    return [c.name for c in settings.cards]


def render_home(entries: list[listing.Entry], settings: Settings, *, sort: str) -> str:
    """The home table with its filter: family, size band, and "fits on <card> for <method>". The
    filter works without JavaScript (CSS :has() on the chosen options, rules written here);
    static/filter.js adds the count of models shown and keeps the choice in the address."""
    page = pages.HOME if sort == "downloads" else pages.HOME_BY_SIZE
    root = pages.root_from(page)
    known, unknown = listing.split_by_downloads(entries) if sort == "downloads" else (listing.by_size(entries), [])
    frame = _frame(settings, page=page, title=str(settings.site.get("title") or "neurarch-trace"),
                   description=str(settings.site.get("description") or ""), feed=True)
    names = _card_names(settings)
    slugs = sorted({e.slug for e in entries if e.slug is not None})
    css = listing.filter_css(slugs, names)
    if "</" in css:  # built from validated slugs only; a closing tag would end the <style> early
        raise ValueError("filter rules must not contain '</'")
    frame.update(head_style=Markup(css), scripts=[root + pages.FILTER_JS])
    sort_links = {"downloads": root + pages.HOME, "size": root + pages.HOME_BY_SIZE}
    filters = {"families": slugs, "bands": listing.size_bands(),
               "cards": [{"value": pages.card_slug(n), "label": n} for n in names],
               "methods": [{"value": m, "label": label} for m, label in listing.METHODS],
               "gpus": [{"value": v, "label": label} for v, label in listing.GPU_LEVELS]}
    return _render("home.html", **frame, crumbs=[], rows=listing.rows(known, root, names),
                   unknown_rows=listing.rows(unknown, root, names), unknown_count=f.count(len(unknown)), sort=sort,
                   sort_links=sort_links, counts=listing.counts(entries), filters=filters,
                   site_description=str(settings.site.get("description") or ""),
                   families_href=root + pages.FAMILIES_INDEX, cards_href=root + pages.CARDS_INDEX,
                   changes_href=root + pages.CHANGES,
                   card_links=[{"name": n, "href": f"{root}{pages.card_dir(n)}/index.html"} for n in names],
                   caption="Every model in the snapshot, " + (
                       "most downloaded first; those whose download count is not known follow, apart"
                       if unknown else "most downloaded first" if sort == "downloads" else "smallest first"))


def render_family(slug: str, members: list[listing.Entry], settings: Settings) -> str:
    """A family's models side by side, smallest first (members: the entries whose slug is `slug`)."""
    page = f"{pages.family_dir(slug)}/index.html"
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title=f"{slug}: models and the GPU memory they need",
                   description=f"The {slug} models side by side: size, layers, context and GPU memory.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": slug, "href": None}]
    any_active = any(e.active is not None for e in members)
    return _render("family.html", **frame, crumbs=crumbs, slug=slug, rows=listing.family_rows(members, root),
                   any_active=any_active, na_span=str(7 if any_active else 6), counts=listing.counts(members),
                   families_href=root + pages.FAMILIES_INDEX, tokens=f.count(settings.assumptions.train_tokens),
                   serve_tokens=f.count(settings.assumptions.serve_tokens),
                   caption=f"Models whose config.json says model_type {slug}, smallest first")


def render_families(entries: list[listing.Entry], settings: Settings) -> str:
    page = pages.FAMILIES_INDEX
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Families", description="Model families in the snapshot.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Families", "href": None}]
    return _render("families.html", **frame, crumbs=crumbs, families=listing.families(entries, root))


def render_cards(entries: list[listing.Entry], settings: Settings) -> str:
    page = pages.CARDS_INDEX
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Cards: which models fit",
                   description="For each GPU card, how many models it can fine-tune or serve.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Cards", "href": None}]
    return _render("cards.html", **frame, crumbs=crumbs, cards=listing.cards(entries, _card_names(settings), root),
                   counts=listing.counts(entries))


def render_card(index: int, entries: list[listing.Entry], settings: Settings) -> str:
    """Every model and method that fits card number `index` on its own, with its largest batch."""
    card = settings.cards[index]
    page = f"{pages.card_dir(card.name)}/index.html"
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title=f"What fits one {card.name}",
                   description=f"Every model you can fine-tune or serve on one {card.name}, with its largest batch.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Cards", "href": root + pages.CARDS_INDEX},
              {"text": card.name, "href": None}]
    got = listing.card_rows(entries, index, root, card.name)
    (rows, unknown_rows), (several, several_unknown) = got["one"], got["several"]
    a = settings.assumptions
    return _render("card.html", **frame, crumbs=crumbs, card=card.name, rows=rows, unknown_rows=unknown_rows,
                   unknown_count=f.count(len(unknown_rows)), none_fit=f.count(got["none"]),
                   several=several, several_unknown=several_unknown,
                   heads=["Full fine-tune", f"LoRA r={f.count(a.lora_rank)}", "QLoRA", "Serve"],
                   several_count=f.count(len(several) + len(several_unknown)),
                   several_unknown_count=f.count(len(several_unknown)),
                   fits=f.count(len(rows) + len(unknown_rows)), usable=f.gb(card.memory_usable_bytes),
                   usable_gib=f.gib(card.memory_usable_bytes),
                   tokens=f.count(a.train_tokens), serve_tokens=f.count(a.serve_tokens), rank=f.count(a.lora_rank),
                   cards_href=root + pages.CARDS_INDEX, headroom=f.ratio(a.headroom))


def render_changes(history: list[dict], live: set[str], settings: Settings) -> str:
    page = pages.CHANGES
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Changes between snapshots",
                   description="Models added, estimates changed and models removed, snapshot by snapshot.", feed=True)
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Changes", "href": None}]
    return _render("changes.html", **frame, crumbs=crumbs, batches=changes.page_batches(history, live, root))


def render_accuracy(settings: Settings) -> str:
    """/accuracy/: the committed accuracy table (data/measurements/accuracy.json) as a page; read, never recomputed."""
    page = pages.ACCURACY
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="How accurate the memory estimates are",
                   description="The estimated peak memory against measured training and serving runs: error per "
                               "method and the fit verdicts per card.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Accuracy", "href": None}]
    return _render("accuracy.html", **frame, crumbs=crumbs, **accuracy_page.page_context(accuracy_page.load()))


def render_sources(settings: Settings) -> str:
    """/sources/: where every card's memory and every GPU's specs and price come from, and each citation key."""
    page = pages.SOURCES
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Sources",
                   description="Where the cards' memory, the GPUs' specifications and their prices come from.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Sources", "href": None}]
    return _render("sources.html", **frame, crumbs=crumbs, **sources.page_context(settings))


def render_search(settings: Settings) -> str:
    page = pages.SEARCH
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Search models", description="Search the models by name or family.",
                   search=False)
    frame["scripts"] = [root + pages.SEARCH_JS]
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Search", "href": None}]
    return _render("search.html", **frame, crumbs=crumbs, families_href=root + pages.FAMILIES_INDEX,
                   cards_href=root + pages.CARDS_INDEX)


def search_documents(entries: list[listing.Entry], family_slugs: list[str]) -> Iterator[tuple[str, str]]:
    """One small document per model and per family for Pagefind, at the path of the page it stands
    for (search.py explains why the pages themselves are not indexed); made one at a time."""
    template = environment().get_template("_search_doc.html")
    for e in entries:
        yield f"{pages.model_dir(e.id)}/index.html", template.render(**listing.search_text(e))
    for s in family_slugs:
        yield (f"{pages.family_dir(s)}/index.html",
               template.render(title=f"{s} (family)", summary=f"The {s} models side by side.", words=f"{s} family"))


def render_404(settings: Settings) -> str:
    """Served for any missing path, at any depth: so it inlines its CSS and links home absolutely."""
    frame = _frame(settings, page=None, title="Page not found", description="This page does not exist.")
    return _render("404.html", **frame, crumbs=[])


# --- files for machines: sitemap, feed, robots.txt, llms.txt (they need site.url: absolute URLs) ---

def _host(url: str) -> str:
    return urlsplit(url).hostname or "localhost"


def render_sitemap(settings: Settings, urls: list[tuple[str, str | None]]) -> str:
    """urls: (page path under public/, RFC 3339 lastmod or None), in the order to list them."""
    site = pages.site_url(settings.site)
    items = [{"loc": site + (p[: -len("index.html")] if p.endswith("index.html") else p), "lastmod": m}
             for p, m in urls]
    return _render("sitemap.xml", urls=items)


def render_feed(settings: Settings, history: list[dict], live: set[str]) -> str:
    site = pages.site_url(settings.site)
    entries = changes.feed_entries(history, live, site, _host(site))
    updated = history[-1]["date"] if history else changes.EPOCH
    return _render("feed.xml", title=f"{settings.site.get('title') or 'neurarch-trace'}: model changes",
                   feed_url=site + pages.FEED, site=site, changes_url=site + "changes/", updated=updated,
                   feed_id=f"tag:{_host(site)},2026:feeds/models", entries=entries)


def render_robots(settings: Settings) -> str:
    return _render("robots.txt", sitemap=pages.site_url(settings.site) + pages.SITEMAP)


def _llms_line(e: listing.Entry) -> str:
    """One model in llms.txt, at the tokens its own estimate used (the job's, or its context when shorter)."""
    active = "" if e.active is None else f" ({f.short_count(e.active)} active per token)"
    tokens = f.UNKNOWN if e.train_tokens is None else f.count(e.train_tokens)
    def where(card: str | None, tight: str | None) -> str:  # as the page's headline: a tight card named too
        return (card or "no single card") + (f"; tight on {tight}" if tight else "")

    return (f"{f.short_count(e.params)} parameters{active}; batch 1 at {tokens} tokens: "
            f"full fine-tune {f.gb(e.full_bytes or 0)} ({where(e.smallest_full, e.tight_full)}), "
            f"LoRA {f.gb(e.lora_bytes or 0)} ({where(e.smallest_lora, e.tight_lora)})")


def render_llms(entries: list[listing.Entry], settings: Settings) -> str:
    """llms.txt: what the site is and one line per estimated model, most downloaded first."""
    site = pages.site_url(settings.site)
    models = [{"id": e.id, "url": f"{site}{pages.model_dir(e.id)}/index.json",
               "page": f"{site}{pages.model_dir(e.id)}/", "text": _llms_line(e)}
              for e in listing.by_downloads(entries) if e.estimated]
    return _render("llms.txt", title=str(settings.site.get("title") or "neurarch-trace"),
                   description=str(settings.site.get("description") or ""), site=site, models=models,
                   accuracy=site + pages.ACCURACY[: -len("index.html")],
                   cards=[{"name": n, "url": f"{site}{pages.card_dir(n)}/"} for n in _card_names(settings)])
