"""Publishing conventions over a built site: sitemap.xml, robots.txt, the Atom feed, llms.txt, canonical
URLs with OpenGraph/Twitter meta on every page, no broken internal link anywhere in public/ (pages,
sitemap, feed, llms.txt, scripts and stylesheet), and nothing loaded from a third-party host."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, iter_records, write_index, write_record
from generator.records import ModelRecord
from generator.settings import load_settings
from generator.site import pages
from generator.site.build import run_build

SETTINGS = load_settings()
SITE = pages.site_url(SETTINGS.site)
SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
ATOM = "{http://www.w3.org/2005/Atom}"
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed snapshot with a lastModified on every other record (the committed one has none)."""
    root = tmp_path_factory.mktemp("publish")
    records = [r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if isinstance(r, ModelRecord)]
    dated = [replace(r, last_modified=f"2026-02-{1 + i % 28:02d}T12:00:00.000Z") if i % 2 == 0 else r
             for i, r in enumerate(records)]
    for record in dated:
        write_record(root / "snap", record)
    write_index(root / "snap", [index_entry(r) for r in dated])
    out = root / "public"
    assert run_build(snapshot_dir=root / "snap", out_dir=out, strict=False, settings=SETTINGS,
                     console=Console(file=io.StringIO())) == 0
    return out


def _target(out: Path, url: str) -> Path:
    """The file an absolute site URL is served from."""
    assert url.startswith(SITE), url
    rel = unquote(url[len(SITE):])
    path = out / rel
    return path / "index.html" if rel == "" or rel.endswith("/") else path


def test_sitemap_lists_every_page_once_with_lastmod(site: Path) -> None:
    root = ET.parse(site / pages.SITEMAP).getroot()
    assert root.tag == f"{SM}urlset"
    urls = root.findall(f"{SM}url")
    locs = [u.findtext(f"{SM}loc") for u in urls]
    assert len(locs) == len(set(locs)) and len(locs) < 50_000
    listed = {_target(site, loc).relative_to(site).as_posix() for loc in locs}
    html = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    assert listed == html - {pages.NOT_FOUND, pages.SEARCH}
    dates = {}
    for u in urls:
        assert set(child.tag for child in u) <= {f"{SM}loc", f"{SM}lastmod"}
        lastmod = u.findtext(f"{SM}lastmod")
        if lastmod is not None:
            assert RFC3339.fullmatch(lastmod), lastmod
            dates[u.findtext(f"{SM}loc")] = lastmod
    models = [loc for loc in locs if "/models/" in loc]
    newest = max(dates[loc] for loc in models if loc in dates)
    assert newest == "2026-02-27T12:00:00Z"
    # Index pages: the snapshot's date, the latest of a record's lastModified and the day its Hub data
    # was read (downloads_source: "scraped around 2026-05-17"), never the clock.
    assert dates[SITE] == "2026-05-17T00:00:00Z"
    assert 0 < sum(loc in dates for loc in models) < len(models)  # only the records that have one


def test_robots_points_at_the_sitemap(site: Path) -> None:
    text = (site / pages.ROBOTS).read_text(encoding="utf-8")
    assert text.splitlines() == ["User-agent: *", "Allow: /", f"Sitemap: {SITE}sitemap.xml"]


def test_the_atom_feed_is_valid(site: Path) -> None:
    feed = ET.parse(site / pages.FEED).getroot()
    assert feed.tag == f"{ATOM}feed"
    for tag in ("id", "title", "updated"):
        assert feed.findtext(f"{ATOM}{tag}"), tag
    assert RFC3339.fullmatch(feed.findtext(f"{ATOM}updated") or "")
    assert feed.find(f"{ATOM}author/{ATOM}name") is not None
    self_link = [x for x in feed.findall(f"{ATOM}link") if x.get("rel") == "self"]
    assert self_link and self_link[0].get("href") == SITE + pages.FEED
    entries = feed.findall(f"{ATOM}entry")
    assert entries
    ids = [e.findtext(f"{ATOM}id") for e in entries]
    assert len(ids) == len(set(ids)) and all(i and i.startswith("tag:") for i in ids)
    for entry in entries:
        assert entry.findtext(f"{ATOM}title") and entry.findtext(f"{ATOM}summary")
        assert RFC3339.fullmatch(entry.findtext(f"{ATOM}updated") or "")
        href = entry.find(f"{ATOM}link").get("href")  # type: ignore[union-attr]
        assert _target(site, urlsplit(href)._replace(fragment="").geturl()).is_file(), href


def test_llms_txt_is_an_index_whose_links_resolve(site: Path) -> None:
    text = (site / pages.LLMS).read_text(encoding="utf-8")
    assert text.startswith(f"# {SETTINGS.site['title']}\n\n> ")
    links = re.findall(r"\]\((https?://[^)]+)\)", text) + re.findall(r"JSON: (\S+)", text)
    assert len(links) > 100
    for link in links:
        assert _target(site, link).is_file(), link
    assert "- [openai-community/gpt2](" in text
    # a job tight on a smaller card than the one that fits says so, as the model page's headline does
    assert "full fine-tune 76.4 GB (H200 141 GB; tight on A100 / H100 80 GB)" in text


class _Meta(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.meta: dict[str, str] = {}
        self.links: list[dict[str, str | None]] = []
        self.resources: list[str] = []
        self.anchors: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "meta":
            key = a.get("property") or a.get("name")
            if key:
                self.meta[key] = a.get("content") or ""
        if tag == "link":
            self.links.append(a)
            if a.get("rel") in ("stylesheet", "icon", "preload", "modulepreload"):
                self.resources.append(a.get("href") or "")
        if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and a.get("src"):
            self.resources.append(a["src"] or "")
        if tag == "a" and a.get("href"):
            self.anchors.append(a["href"] or "")
        self._in_title = tag == "title" and not self.title  # the page's, not an SVG chart's

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if not p.relative_to(site).as_posix().startswith("pagefind/"))


def test_every_page_has_canonical_opengraph_and_twitter_meta(site: Path) -> None:
    for path in _pages(site):
        rel = path.relative_to(site).as_posix()
        page = _Meta()
        page.feed(path.read_text(encoding="utf-8"))
        assert page.meta.get("description"), rel
        if rel == pages.NOT_FOUND:
            assert not any(link.get("rel") == "canonical" for link in page.links)
            continue
        canonical = [link.get("href") for link in page.links if link.get("rel") == "canonical"]
        folder = rel[: -len("index.html")] if rel.endswith("index.html") else rel
        assert canonical == [SITE + folder], rel
        assert page.meta["og:url"] == canonical[0]
        assert page.meta["og:title"] == page.title and page.meta["og:type"] == "website"
        assert page.meta["og:description"] == page.meta["description"]
        assert page.meta["og:site_name"] == SETTINGS.site["title"]
        assert page.meta["twitter:card"] == "summary" and page.meta["twitter:title"] == page.title


def test_nothing_is_loaded_from_another_host(site: Path) -> None:
    for path in _pages(site):
        page = _Meta()
        page.feed(path.read_text(encoding="utf-8"))
        for src in page.resources:
            parts = urlsplit(src)
            allowed_404 = path.name == pages.NOT_FOUND and src.startswith(SITE)
            assert allowed_404 or not (parts.scheme or parts.netloc), f"{path}: {src}"
    css = (site / pages.STYLESHEET).read_text(encoding="utf-8")
    assert "@import" not in css and not re.search(r"url\(\s*['\"]?(https?:)?//", css)
    for script in (pages.FILTER_JS, pages.SEARCH_JS):
        js = (site / script).read_text(encoding="utf-8")
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", js), script


def test_no_internal_link_is_broken_anywhere(site: Path) -> None:
    """Every relative href/src of every page, and every site URL of the sitemap, feed and llms.txt."""
    ids: dict[Path, set[str]] = {}
    for path in _pages(site):
        ids[path] = set(re.findall(r'\sid="([^"]+)"', path.read_text(encoding="utf-8")))
    checked = 0
    for path in ids:
        page = _Meta()
        page.feed(path.read_text(encoding="utf-8"))
        for link in page.anchors + page.resources + [x.get("href") or "" for x in page.links]:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                if link.startswith(SITE):
                    assert _target(site, parts._replace(fragment="", query="").geturl()).is_file(), link
                continue
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            assert target.is_relative_to(site.resolve()), f"{path}: {link} leaves the site"
            if target.is_dir():
                target = target / "index.html"
            assert target.is_file(), f"{path}: {link} does not resolve"
            if parts.fragment and target.suffix == ".html":
                assert parts.fragment in ids[target], f"{path}: {link} has no such anchor"
            checked += 1
    assert checked > 3000
    for name in (pages.SITEMAP, pages.FEED):
        for url in re.findall(r"(?:<loc>|href=\")(https?://[^<\"]+)", (site / name).read_text(encoding="utf-8")):
            assert _target(site, urlsplit(url)._replace(fragment="").geturl()).is_file(), url
