"""Accessibility: WCAG AA contrast of the stylesheet's colour pairs in both colour schemes, semantic
tables (a caption, every header cell scoped), `lang`, a skip link, and a visible focus style."""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR
from generator.settings import load_settings
from generator.site.build import run_build
from generator.site.render import stylesheet

TEXT = ("fg", "muted", "accent", "ok", "warn", "err", "info")  # colours text is written in
GRAPHICS = ("c-full", "c-lora", "c-serve", "muted", "focus")  # chart lines and bars, the focus ring
SURFACES = ("bg", "panel")


def _variables(block: str) -> dict[str, str]:
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{6})", block))


def schemes() -> dict[str, dict[str, str]]:
    css = stylesheet()
    light = _variables(css.split("@media (prefers-color-scheme: dark)")[0].split(":root {", 1)[1].split("}", 1)[0])
    dark_block = css.split("@media (prefers-color-scheme: dark)")[1].split(":root {", 1)[1].split("}", 1)[0]
    return {"light": light, "dark": {**light, **_variables(dark_block)}}


def luminance(hex_colour: str) -> float:
    """WCAG 2.2 relative luminance of an sRGB colour."""
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_wcag_formula() -> None:
    assert round(contrast("#000000", "#ffffff"), 1) == 21.0
    assert round(contrast("#777777", "#ffffff"), 2) == 4.48  # the well-known just-failing grey


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_colours_meet_aa_on_every_surface(scheme: str) -> None:
    colours = schemes()[scheme]
    assert set(TEXT + GRAPHICS + SURFACES) <= set(colours), "a colour variable is missing"
    low = [(fg, bg, round(contrast(colours[fg], colours[bg]), 2)) for fg in TEXT for bg in SURFACES
           if contrast(colours[fg], colours[bg]) < 4.5]
    assert low == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_chart_colours_and_focus_ring_meet_non_text_contrast(scheme: str) -> None:
    colours = schemes()[scheme]
    low = [(c, round(contrast(colours[c], colours["bg"]), 2)) for c in GRAPHICS
           if contrast(colours[c], colours["bg"]) < 3.0]
    assert low == []


def test_focus_is_visible_and_the_skip_link_appears_on_focus() -> None:
    css = stylesheet()
    assert re.search(r":focus-visible \{ outline: 3px solid var\(--focus\)", css)
    assert re.search(r"\.skip:focus \{ left: 1rem", css)
    assert "outline: none" not in css and "outline:0" not in css.replace(" ", "")


class _Tables(HTMLParser):
    """Each top-level table's first child is its caption (the folded layers of the structure table are
    that table continued, nested inside it); every th has a scope; and the page's lang and first link."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.expect_caption = False
        self.depth = 0
        self.tables = 0
        self.lang: str | None = None
        self.first_body_link: str | None = None
        self.in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "html":
            self.lang = a.get("lang")
        if tag == "body":
            self.in_body = True
        if self.in_body and self.first_body_link is None and tag == "a":
            self.first_body_link = f"{a.get('class')} {a.get('href')}"
        if self.expect_caption and tag != "caption":
            self.problems.append(f"table without a caption first (got <{tag}>)")
        self.expect_caption = False
        if tag == "table":
            self.tables += 1
            self.expect_caption = self.depth == 0
            self.depth += 1
        if tag == "th" and a.get("scope") not in ("col", "row", "colgroup", "rowgroup"):
            self.problems.append("th without scope")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.depth -= 1


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("a11y") / "public"
    assert run_build(snapshot_dir=DEFAULT_SNAPSHOT_DIR, out_dir=out, strict=False, settings=load_settings(),
                     console=Console(file=io.StringIO()), search_index=False) == 0
    return out


def test_tables_are_semantic_and_pages_have_lang_and_a_skip_link(site: Path) -> None:
    checked = 0
    for page in sorted(site.rglob("*.html")):
        parser = _Tables()
        parser.feed(page.read_text(encoding="utf-8"))
        assert parser.lang == "en", page
        assert parser.first_body_link == "skip #main", page
        assert parser.problems == [], page
        checked += parser.tables
    assert checked > 500
