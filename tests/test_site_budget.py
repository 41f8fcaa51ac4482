"""Page budgets: a model page is at most 60 kB of HTML, and at most 150 kB with the stylesheet and any
script it loads; the home page's own script and style stay small too. Checked on every page built
from the committed snapshot (each with its memory chart), and on the largest ones again with a synthetic
`memory.curve` at a 1M-token context (the longest curve, 12 points)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, load_record
from generator.pipeline import report_for_record
from generator.settings import load_settings
from generator.site import pages
from generator.site.build import run_build
from generator.site.render import render_model_page
from test_site_charts import curve_for, with_curve

HTML_BUDGET = 60_000
TOTAL_BUDGET = 150_000
SETTINGS = load_settings()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("budget") / "public"
    assert run_build(snapshot_dir=DEFAULT_SNAPSHOT_DIR, out_dir=out, strict=False, settings=SETTINGS,
                     console=Console(file=io.StringIO()), search_index=False) == 0
    return out


def _loaded(page: Path, out: Path) -> list[Path]:
    """The stylesheet and scripts a page loads (all relative: nothing comes from another host)."""
    text = page.read_text(encoding="utf-8")
    refs = re.findall(r'<link rel="stylesheet" href="([^"]+)"', text) + re.findall(r'<script src="([^"]+)"', text)
    return [(page.parent / ref).resolve() for ref in refs]


def _weight(page: Path, out: Path) -> int:
    return page.stat().st_size + sum(p.stat().st_size for p in _loaded(page, out))


def test_every_model_page_is_within_budget(site: Path) -> None:
    model_pages = sorted(site.glob("models/*/*/index.html"))
    assert len(model_pages) > 100
    over = [(p.stat().st_size, p) for p in model_pages if p.stat().st_size > HTML_BUDGET]
    assert over == []
    heavy = [(_weight(p, site), p) for p in model_pages if _weight(p, site) > TOTAL_BUDGET]
    assert heavy == []
    for page in model_pages[:3]:
        assert [p.name for p in _loaded(page, site)] == ["style.css"]  # a model page runs no script


def test_the_largest_pages_stay_within_budget_with_the_memory_chart(site: Path) -> None:
    largest = sorted(site.glob("models/*/*/index.html"), key=lambda p: p.stat().st_size)[-5:]
    css = (site / pages.STYLESHEET).stat().st_size
    for page in largest:
        model = "/".join(page.parent.relative_to(site / "models").parts)
        record = load_record(DEFAULT_SNAPSHOT_DIR, model)
        assert record is not None
        report = report_for_record(record, SETTINGS)
        html = render_model_page(with_curve(report, curve_for(report, 1 << 20)), record, SETTINGS, standalone=False)
        assert 'id="memory-chart"' in html
        size = len(html.encode("utf-8"))
        assert size <= HTML_BUDGET, (model, size)
        assert size + css <= TOTAL_BUDGET


def test_index_pages_load_little(site: Path) -> None:
    for rel in (pages.HOME, pages.HOME_BY_SIZE, pages.SEARCH):
        page = site / rel
        assets = _loaded(page, site)
        assert sum(p.stat().st_size for p in assets) < 20_000, rel
    # The search page loads Pagefind's own script only when a query is made; it is in public/ itself.
    assert "pagefind/pagefind.js" in (site / pages.SEARCH_JS).read_text(encoding="utf-8")
