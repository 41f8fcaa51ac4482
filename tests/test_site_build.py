"""The whole site from the committed snapshot: deterministic, every section on every page, valid
JSON twins, internal links that resolve, a readable summary, --strict, and atomic replacement."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import jsonschema
import pytest
from rich.console import Console

from generator.errors import RecordError
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, index_entry, load_record, write_index, write_record
from generator.settings import load_settings
from generator.site import build as build_mod
from generator.site import pages
from generator.site.build import run_build

SCHEMA = json.loads((Path(build_mod.__file__).parent / "report.schema.json").read_text(encoding="utf-8"))
GOLDEN_SNAPSHOT = Path(__file__).parent / "golden" / "snapshot"
# The sections of a model page, in the order of the reference pages (custom-code only with auto_map).
SECTIONS = ("headline", "provenance", "count", "custom-code", "cost", "memory", "assumptions", "validation",
            "structure", "findings", "own-model")


def _build(snapshot: Path, out: Path, strict: bool = False, max_problems: int | None = None) -> tuple[int, str]:
    buffer = io.StringIO()
    rc = run_build(snapshot_dir=snapshot, out_dir=out, strict=strict, settings=load_settings(),
                   console=Console(file=buffer, width=200), max_problems=max_problems)
    return rc, buffer.getvalue()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class _Page(HTMLParser):
    """Collects ids, links and the crumbs of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.links: list[str] = []
        self.in_crumbs = False
        self.crumbs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"])
        for key in ("href", "src"):
            if a.get(key) is not None:
                self.links.append(a[key])
        if tag == "nav" and a.get("class") == "crumbs":
            self.in_crumbs = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "nav":
            self.in_crumbs = False

    def handle_data(self, data: str) -> None:
        if self.in_crumbs and data.strip():
            self.crumbs.append(data.strip())


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("site") / "public"
    rc, output = _build(DEFAULT_SNAPSHOT_DIR, out)
    assert rc == 0
    return out, output


def test_two_builds_are_byte_identical(site: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = site
    _build(DEFAULT_SNAPSHOT_DIR, tmp_path / "again")
    first, second = _tree(out), _tree(tmp_path / "again")
    assert sorted(first) == sorted(second)
    assert [k for k in first if first[k] != second[k]] == []


def test_every_model_page_has_every_section_in_order(site: tuple[Path, str]) -> None:
    out, _ = site
    model_pages = sorted(out.glob("models/*/*/index.html"))
    assert len(model_pages) > 100
    estimated = 0
    for html in model_pages:
        page = _parse(html)
        org, name = html.parent.parent.name, html.parent.name
        assert page.crumbs[0] == "Models" and page.crumbs[-1] == name and len(page.crumbs) == 3, html
        twin = html.with_name("index.json")
        if not twin.exists():
            assert "not-estimated" in page.ids and "Not estimated yet: " in html.read_text(encoding="utf-8")
            continue
        estimated += 1
        report = json.loads(twin.read_text(encoding="utf-8"))
        assert report["model"]["id"] == f"{org}/{name}"
        expected = [s for s in SECTIONS if s != "custom-code" or report["model"]["custom_code"]]
        assert [i for i in page.ids if i in SECTIONS] == expected, html
        assert 'rel="alternate" type="application/json" href="index.json"' in html.read_text(encoding="utf-8")
    assert estimated > 50


def test_every_json_twin_matches_the_report_schema(site: tuple[Path, str]) -> None:
    out, _ = site
    validator = jsonschema.Draft202012Validator(SCHEMA)
    twins = sorted(out.glob("models/*/*/index.json"))
    assert twins
    for twin in twins:
        text = twin.read_text(encoding="ascii")  # ensure_ascii: any non-ASCII byte fails here
        validator.validate(json.loads(text))


def test_every_internal_link_resolves(site: tuple[Path, str]) -> None:
    out, _ = site
    ids = {}
    for html in out.rglob("*.html"):
        ids[html.resolve()] = set(_parse(html).ids)
    checked = 0
    for html, _ in ids.items():
        for link in _parse(html).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # external (the Hub, the canonical site URL from the 404 page)
            target = html if not parts.path else (html.parent / unquote(parts.path)).resolve()
            assert target.is_relative_to(out.resolve()), f"{html}: {link} leaves the site"
            if target.is_dir():
                target = target / "index.html"
            assert target.is_file(), f"{html}: {link} does not resolve"
            if parts.fragment and target.suffix == ".html":
                assert parts.fragment in ids[target], f"{html}: {link} has no such anchor"
            checked += 1
    assert checked > 1000


def test_home_lists_every_model_with_both_sort_orders(site: tuple[Path, str]) -> None:
    out, _ = site
    index = json.loads((DEFAULT_SNAPSHOT_DIR / "index.json").read_text(encoding="utf-8"))
    ids = [m["id"] for m in index["models"]]
    for page in (out / "index.html", out / "by-size" / "index.html"):
        text = page.read_text(encoding="utf-8")
        rows = re.findall(r'<th scope="row"><a href="[^"]*">([^<]*)</a>', text)
        assert sorted(rows) == sorted(ids)
        # Sorting works without JavaScript (each order is a page); the one script is our own filter's.
        assert re.findall(r"<script[^>]*>", text) == [f'<script src="{"../" * page.relative_to(out).as_posix().count("/")}'
                                                      'static/filter.js" defer>']
    not_estimated = [p for p in out.glob("models/*/*/index.html") if not p.with_name("index.json").exists()]
    assert ("not estimated yet: " in (out / "index.html").read_text(encoding="utf-8")) == bool(not_estimated)
    assert (out / "404.html").is_file() and (out / "static" / "style.css").is_file()
    assert "prefers-color-scheme: dark" in (out / "static" / "style.css").read_text(encoding="utf-8")
    assert (out / "families" / "qwen2" / "index.html").is_file()


def test_summary_reports_pages_problems_and_seconds(site: tuple[Path, str]) -> None:
    _, output = site
    assert re.search(r"pages written\s*│\s*\d+", output)
    assert re.search(r"models rendered\s*│\s*\d+", output) and "seconds by phase: " in output


def _snapshot_with_a_broken_record(tmp_path: Path) -> Path:
    """The golden snapshot plus one record whose config.json is not JSON (a failed model)."""
    from generator.hub.snapshot import index_entry, iter_records, write_index, write_record
    from generator.records import ModelRecord

    snap = tmp_path / "snap"
    records = [r for r in iter_records(GOLDEN_SNAPSHOT)] + [ModelRecord(id="broken/config", config_json="{not json")]
    for record in records:
        write_record(snap, record)
    write_index(snap, [index_entry(r) for r in records])
    return snap


def test_strict_fails_and_keeps_the_previous_site(tmp_path: Path) -> None:
    out = tmp_path / "public"
    rc, _ = _build(GOLDEN_SNAPSHOT, out, strict=True)
    assert rc == 0
    before = _tree(out)
    rc, output = _build(_snapshot_with_a_broken_record(tmp_path), out, strict=True)
    assert rc == 1 and "left as it was" in output and "broken/config" in output
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public", "snap"]


def test_unsupported_models_are_not_estimated_pages_not_failures(tmp_path: Path) -> None:
    from generator.hub.snapshot import index_entry, iter_records, write_index, write_record
    from generator.records import ModelRecord

    snap = tmp_path / "snap"
    new = ModelRecord(id="someone/totally-new", config_json=json.dumps(
        {"model_type": "totally_new", "architectures": ["TotallyNewForCausalLM"], "d_state": 16}))
    records = [*iter_records(GOLDEN_SNAPSHOT), new]
    for record in records:
        write_record(snap, record)
    write_index(snap, [index_entry(r) for r in records])
    rc, output = _build(snap, tmp_path / "public", strict=True)
    assert rc == 0 and "not estimated yet" in output and "unsupported architecture" in output
    page = (tmp_path / "public/models/someone/totally-new/index.html").read_text(encoding="utf-8")
    assert "Not estimated yet: model_type &#39;totally_new&#39; is not supported yet." in page


def test_max_problems_is_the_nightly_alarm(tmp_path: Path) -> None:
    snap = _snapshot_with_a_broken_record(tmp_path)
    assert _build(snap, tmp_path / "a", max_problems=1)[0] == 0
    rc, output = _build(snap, tmp_path / "b", max_problems=0)
    assert rc == 1 and not (tmp_path / "b").exists()


def test_a_rebuild_replaces_the_whole_site(tmp_path: Path) -> None:
    out = tmp_path / "public"
    out.mkdir()  # an empty folder may be built into
    assert _build(GOLDEN_SNAPSHOT, out)[0] == 0
    (out / "stale.html").write_text("old", encoding="utf-8")
    assert _build(GOLDEN_SNAPSHOT, out)[0] == 0
    assert not (out / "stale.html").exists() and (out / "index.html").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["public"]  # no temporary or old folder left


def test_a_folder_that_is_not_a_site_is_never_replaced(tmp_path: Path) -> None:
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work", encoding="utf-8")
    with pytest.raises(RecordError, match="not replacing it"):
        _build(GOLDEN_SNAPSHOT, out)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert [p.name for p in tmp_path.iterdir()] == ["home"]


@pytest.mark.parametrize("fault", [OSError("disk full"), KeyboardInterrupt()], ids=["oserror", "interrupt"])
def test_a_build_killed_halfway_leaves_the_previous_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         fault: BaseException) -> None:
    out = tmp_path / "public"
    assert _build(GOLDEN_SNAPSHOT, out)[0] == 0
    before = _tree(out)
    real_write = pages.SiteWriter.write
    calls = []

    def write(self: pages.SiteWriter, rel: str, text: str) -> Path:
        calls.append(rel)
        if len(calls) == 3:  # the second model page: some files are already in the new tree
            raise fault
        return real_write(self, rel, text)

    monkeypatch.setattr(pages.SiteWriter, "write", write)
    with pytest.raises(type(fault)):
        _build(DEFAULT_SNAPSHOT_DIR, out)
    assert len(calls) == 3
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["public"]


def test_leftovers_of_a_killed_swap_are_recovered(tmp_path: Path) -> None:
    out = tmp_path / "public"
    assert _build(GOLDEN_SNAPSHOT, out)[0] == 0
    before = _tree(out)
    out.rename(tmp_path / ".public-old-x1")  # killed between the two renames of the swap
    (tmp_path / ".public-build-x2").mkdir()  # and a half-written tree from another killed build
    with pytest.raises(RecordError):  # no snapshot: the build stops before writing anything
        run_build(snapshot_dir=tmp_path / "missing", out_dir=out, strict=False, settings=load_settings(),
                  console=Console(file=io.StringIO()))
    assert _tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["public"]


def _home_rows(out: Path) -> dict[str, dict[str, str]]:
    """The home table's rows: model id -> the data attributes the filter matches."""
    text = (out / "index.html").read_text(encoding="utf-8")
    rows = {}
    for attrs, model in re.findall(r'<tr (data-family="[^>]*)><th scope="row"><a href="[^"]*">([^<]*)</a>', text):
        rows[model] = dict(re.findall(r'data-([a-z]+)="([^"]*)"', attrs))
    return rows


def test_each_card_page_lists_exactly_the_models_that_fit_it(site: tuple[Path, str]) -> None:
    out, _ = site
    rows = _home_rows(out)
    settings = load_settings()
    assert len(rows) > 100
    for card in settings.cards:
        slug = pages.card_slug(card.name)
        text = (out / "cards" / slug / "index.html").read_text(encoding="utf-8")
        one, _, rest = text.partition('id="several"')
        listed = re.findall(r'<th scope="row"><a href="[^"]*">([^<]*)</a>', one)
        methods = ("full", "lora", "qlora", "serve")
        fits = sorted(m for m, r in rows.items() if any(slug in r[k].split() for k in methods))
        assert sorted(listed) == fits, card.name
        several = sorted(m for m, r in rows.items() if m not in fits and any(
            t in r[k].split() for k in methods for t in (slug + "-8", slug + "-n")))
        assert sorted(re.findall(r'<th scope="row"><a href="[^"]*">([^<]*)</a>', rest)) == several, card.name
        assert f"<h1>What fits one {card.name}</h1>" in text
    t4 = (out / "cards" / "t4-16-gb" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'openai-community/gpt2</a></th><td class="num"[^>]*>124M</td><td class="num[^"]*"[^>]*>batch ', t4)
    assert "meta-llama/Llama-3.1-405B" not in t4.partition('id="several"')[0]  # it needs several T4s
    assert re.search(r'meta-llama/Llama-3.1-405B</a></th><td class="num"[^>]*>[^<]*</td><td class="num answer" '
                     r'data-label="Full fine-tune">(\d+ GPUs|—)</td>', t4)
    cards_index = (out / "cards" / "index.html").read_text(encoding="utf-8")
    assert cards_index.count('<tr><th scope="row"><a href="') == len(settings.cards)


def test_the_home_filter_has_a_rule_for_every_option(site: tuple[Path, str]) -> None:
    out, _ = site
    text = (out / "index.html").read_text(encoding="utf-8")
    style = text.split("<style>", 1)[1].split("</style>", 1)[0]
    families = re.findall(r'<option value="([^"]+)">\1</option>', text)
    assert "qwen2" in families and len(families) > 20
    for family in families:
        assert f'option[value="{family}"]:checked) tbody tr[data-family]:not([data-family="{family}"])' in style
    for card in load_settings().cards:
        slug = pages.card_slug(card.name)
        for method in ("full", "lora", "qlora", "serve"):
            when = (f'#f-card option[value="{slug}"]:checked):has(#f-method option[value="{method}"]:checked)'
                    f':has(#f-gpus option[value="%s"]:checked) tbody tr[data-family]')
            # one GPU: the card's own token; up to 8: or slug-8; up to 512: or slug-n
            assert (when % "1") + f':not([data-{method}~="{slug}"]){{display:none}}' in style
            assert (when % "8") + f':not([data-{method}~="{slug}"]):not([data-{method}~="{slug}-8"])' in style
            assert (when % "n") + f':not([data-{method}~="{slug}"]):not([data-{method}~="{slug}-8"])' \
                f':not([data-{method}~="{slug}-n"])' in style
    assert re.findall(r'<select id="f-gpus" name="gpus">(.*?)</select>', text) == [
        '<option value="1">one GPU</option><option value="8">up to 8 GPUs</option>'
        '<option value="n">up to 512 GPUs</option>']
    rows = _home_rows(out)
    assert rows["openai-community/gpt2"]["family"] == "gpt2" and rows["openai-community/gpt2"]["size"] == "s0"
    assert "t4-16-gb" in rows["openai-community/gpt2"]["full"].split()
    assert "t4-16-gb" in rows["openai-community/gpt2"]["qlora"].split()
    big = rows["meta-llama/Llama-3.1-405B"]
    assert big["size"] == "s5" and not {"t4-16-gb", "h200-141-gb"} & set(big["full"].split())
    # a 405B full fine-tune runs on many GPUs of a card: more than a node of 8 (H200: 8 x 141 GB is too little)
    assert "h200-141-gb-n" in big["full"].split()
    # Qwen3-8B: QLoRA on one T4, LoRA on 2 to 8 of them, a full fine-tune on more than 8
    qwen = rows["Qwen/Qwen3-8B"]
    assert "t4-16-gb" in qwen["qlora"].split() and "t4-16-gb-8" in qwen["lora"].split()
    assert "t4-16-gb-n" in qwen["full"].split()


def test_family_pages_compare_their_models_smallest_first(site: tuple[Path, str]) -> None:
    out, _ = site
    text = (out / "families" / "qwen3" / "index.html").read_text(encoding="utf-8")
    assert '<table class="compare">' in text
    heads = re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', text)
    assert heads[:1] == ["Model"] and {"Params", "Layers", "Context", "Full fine-tune", "LoRA", "Serve"} <= set(heads)
    body = text.split("<tbody>")[1]
    models = re.findall(r'<th scope="row"><a href="[^"]*">([^<]*)</a>', body)
    assert "Qwen/Qwen3-0.6B" in models and len(models) > 3
    params = re.findall(r'</a></th><td class="num">([0-9.]+)([KMBT])</td>', body)
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
    values = [float(n) * scale[u] for n, u in params]
    assert values == sorted(values)


def test_two_ids_that_differ_only_in_case_get_one_folder(tmp_path: Path) -> None:
    """Workers write each model's folder themselves: the parent claims the folders in snapshot order
    first, so the second of two ids that would share a folder on macOS is refused, never written."""
    gpt2 = load_record(DEFAULT_SNAPSHOT_DIR, "openai-community/gpt2")
    records = [replace(gpt2, id="Case/Model"), replace(gpt2, id="case/model")]
    snap = tmp_path / "snap"
    for record in records:
        write_record(snap, record)
    write_index(snap, [index_entry(r) for r in records])
    buffer = io.StringIO()
    rc = run_build(snapshot_dir=snap, out_dir=tmp_path / "public", strict=False, settings=load_settings(),
                   console=Console(file=buffer, width=250), jobs=2, search_index=False)
    assert rc == 0
    assert "case/model: 'case/model': id = 'case/model': shares its folder with 'Case/Model'" in buffer.getvalue()
    assert (tmp_path / "public/models/Case/Model/index.html").is_file()
    assert not (tmp_path / "public/models/case").exists()
