"""Jinja2 rendering: one strict, autoescaping environment, and one function per page kind.

StrictUndefined turns a missing context key into an error (a model whose page cannot be rendered is
listed by the build, never published half-empty); autoescape escapes every string that came from
the Hub. The only strings marked safe are our own stylesheet and the JSON twin with `<`, `>` and
`&` already \\u-escaped, neither of which can close the raw-text element it is placed in.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from .. import format as f
from ..estimator import Report
from ..records import ModelRecord
from ..settings import Settings
from . import listing, pages
from .context import model_context

def _templates_dir() -> Path:
    """templates/ of the checkout (editable install), else the copy the wheel ships as generator/templates."""
    here = Path(__file__).resolve().parents[2] / "templates"
    return here if here.is_dir() else Path(__file__).resolve().parents[1] / "templates"


TEMPLATES = _templates_dir()


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=True,
                       trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


@functools.lru_cache(maxsize=1)
def stylesheet() -> str:
    return (TEMPLATES / "static" / "style.css").read_text(encoding="utf-8")


def twin_json(report: Report) -> str:
    """The JSON twin: sorted keys, ASCII only, and no raw `<`, `>`, `&` or `'` (they occur only inside
    strings, where \\u003c is the same value), so it is safe to embed in a page and to serve."""
    text = json.dumps(report.to_dict(), sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text + "\n"


def _frame(settings: Settings, *, page: str | None, title: str, description: str,
           alternate: str | None = None) -> dict[str, Any]:
    """What base.html needs. page=None renders a self-contained file: CSS inline, absolute links."""
    url = pages.site_url(settings.site)
    site_title = str(settings.site.get("title") or "neurarch-trace")
    if page is None:
        css = {"href": None, "inline": _inline_css()}
        home = url + "index.html" if url else None
        canonical = None
    else:
        root = pages.root_from(page)
        css = {"href": root + pages.STYLESHEET, "inline": None}
        home = root + "index.html"
        folder = page[: -len("index.html")] if page.endswith("index.html") else page
        canonical = url + folder if url else None
    return {"title": title, "description": description, "site_title": site_title, "css": css,
            "home_href": home, "canonical": canonical, "alternate": alternate}


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
    Report embedded as JSON) for `neurarch-trace MODEL --html FILE`. record=None: a local config."""
    name = pages.display_name(report.model.id)
    description = f"GPU memory and cost to fine-tune and serve {report.model.id}, estimated from its config.json."
    title = f"{name}: GPU memory to fine-tune"
    if standalone:
        frame = _frame(settings, page=None, title=title, description=description)
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
    return _render("model.html", **frame, **context, embedded_json=embedded)


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
                   downloads_source=record.downloads_source, problems=list(record.problems))


def render_home(entries: list[listing.Entry], settings: Settings, *, sort: str) -> str:
    page = pages.HOME if sort == "downloads" else pages.HOME_BY_SIZE
    root = pages.root_from(page)
    ordered = listing.by_downloads(entries) if sort == "downloads" else listing.by_size(entries)
    frame = _frame(settings, page=page, title=str(settings.site.get("title") or "neurarch-trace"),
                   description=str(settings.site.get("description") or ""))
    sort_links = {"downloads": root + pages.HOME, "size": root + pages.HOME_BY_SIZE}
    return _render("home.html", **frame, crumbs=[], rows=listing.rows(ordered, root), sort=sort,
                   sort_links=sort_links, counts=listing.counts(entries),
                   site_description=str(settings.site.get("description") or ""),
                   families_href=root + pages.FAMILIES_INDEX,
                   caption="Every model in the snapshot, " + ("most downloaded first" if sort == "downloads"
                                                             else "smallest first"))


def render_family(slug: str, entries: Iterable[listing.Entry], settings: Settings) -> str:
    page = f"{pages.family_dir(slug)}/index.html"
    root = pages.root_from(page)
    members = listing.by_downloads(e for e in entries if e.slug == slug)
    frame = _frame(settings, page=page, title=f"{slug}: models and the GPU memory they need",
                   description=f"Fine-tuning memory and cost of the {slug} models in the snapshot.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": slug, "href": None}]
    return _render("family.html", **frame, crumbs=crumbs, slug=slug, rows=listing.rows(members, root),
                   sort_links=None, counts=listing.counts(members), families_href=root + pages.FAMILIES_INDEX,
                   caption=f"Models whose config.json says model_type {slug}, most downloaded first")


def render_families(entries: list[listing.Entry], settings: Settings) -> str:
    page = pages.FAMILIES_INDEX
    root = pages.root_from(page)
    frame = _frame(settings, page=page, title="Families", description="Model families in the snapshot.")
    crumbs = [{"text": "Models", "href": root + pages.HOME}, {"text": "Families", "href": None}]
    return _render("families.html", **frame, crumbs=crumbs, families=listing.families(entries, root))


def render_404(settings: Settings) -> str:
    """Served for any missing path, at any depth: so it inlines its CSS and links home absolutely."""
    frame = _frame(settings, page=None, title="Page not found", description="This page does not exist.")
    return _render("404.html", **frame, crumbs=[])
