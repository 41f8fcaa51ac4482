"""What a new user checks first, on the whole site built from the committed snapshot: every page's
units, serving precision, token counts, unknown values, dates and citations agree with the data."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from generator import format as f
from generator import setups_text
from generator.errors import ConfigError
from generator.hub.snapshot import DEFAULT_SNAPSHOT_DIR, iter_records
from generator.settings import DEFAULT_CONFIG, cited, load_settings
from generator.site import changes, listing
from generator.site.build import run_build

SETTINGS = load_settings()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("trust") / "public"
    rc = run_build(snapshot_dir=DEFAULT_SNAPSHOT_DIR, out_dir=out, strict=False, settings=SETTINGS,
                   console=Console(file=io.StringIO(), width=200), search_index=False)
    assert rc == 0
    return out


def _twins(site: Path) -> dict[str, dict]:
    return {p.parent.relative_to(site / "models").as_posix(): json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((site / "models").glob("*/*/index.json"))}


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_serving_column_and_assumptions_name_the_same_storage(site: Path) -> None:
    """Item 3: a page headed "Serve fp8" says in its Assumptions that fp8 is what serving is priced at."""
    quantised = 0
    for model, twin in _twins(site).items():
        text = _text((site / "models" / model / "index.html").read_text(encoding="utf-8"))
        q = twin["params"]["quantization"]
        name = f.serve_weights(tuple(q.items()) if q else None)
        assert f"Serve {name}, " in text, model
        serving = text.split("computed only where one card cannot hold batch 1. Serving: ",
                             1)[1].split("; the peak is")[0]
        total = f.gb(twin["memory"]["serve_weight_bytes"])
        if name == "bf16":
            assert serving.startswith("bf16 weights (2 bytes per parameter)"), model
        else:
            quantised += 1
            assert serving.startswith(f"the weights as the checkpoint stores them, {name} ({q['describes']};"), model
            assert "bf16 weights" not in serving, model
        assert f"{total} in all" in serving, model
    assert quantised >= 12  # the snapshot's fp8 and mxfp4 checkpoints


def test_no_line_mixes_gb_and_gib_and_the_units_are_explained_once(site: Path) -> None:
    """Item 6: pages speak GB; GiB appears once, in the note that explains a card's label."""
    for page in [*sorted((site / "models").glob("*/*/index.html")), *sorted((site / "cards").glob("*/index.html"))]:
        html = page.read_text(encoding="utf-8")
        notes = re.findall(r'<p class="units">.*?</p>', html)
        assert len(notes) == 1, page
        assert "GiB" in notes[0] and "10<sup>9</sup> bytes" in notes[0]
        rest = html.replace(notes[0], "")
        assert "GiB" not in rest and "MiB" not in rest, page
    h200 = (site / "models" / "Qwen" / "Qwen3-8B" / "index.html").read_text(encoding="utf-8")
    assert "140.4 GiB (GiB, 2<sup>30</sup> bytes) for the H200 141 GB, which is 151 GB" in h200


def test_llms_txt_gives_each_model_the_tokens_its_page_uses(site: Path) -> None:
    """Item 7: encoders with a 512-token context say 512 in llms.txt, as their page does."""
    twins = _twins(site)
    models = (site / "llms.txt").read_text(encoding="utf-8").split("## Models")[1]
    lines = re.findall(r"^- \[([^\]]+)\]\([^)]*\): (.*)$", models, re.M)
    assert len(lines) == len(twins)
    seen = set()
    for model, text in lines:
        tokens = twins[model]["memory"]["train_tokens"]
        assert f"batch 1 at {f.count(tokens)} tokens:" in text, model
        page = (site / "models" / model / "index.html").read_text(encoding="utf-8")
        assert f"at batch 1 and {f.count(tokens)} tokens" in page
        seen.add(tokens)
    assert {512, 2048} <= seen


def test_moe_pages_and_llms_txt_show_active_parameters(site: Path) -> None:
    """Item 8: Qwen3-30B-A3B's 3,353,032,704 active parameters (the Report's params.active) are shown."""
    twin = _twins(site)["Qwen/Qwen3-30B-A3B"]
    assert twin["params"]["active"] == 3_353_032_704
    html = (site / "models" / "Qwen" / "Qwen3-30B-A3B" / "index.html").read_text(encoding="utf-8")
    assert '<strong title="3,353,032,704">3.35B</strong> of its 30.5B parameters are active per token' in html
    assert "(8 of 128 routed experts per MoE layer)" in html
    assert "Qwen3-30B-A3B/): 30.5B parameters (3.35B active per token);" in (site / "llms.txt").read_text()
    dense = (site / "models" / "Qwen" / "Qwen3-8B" / "index.html").read_text(encoding="utf-8")
    assert 'id="active"' not in dense


def test_a_quantised_checkpoint_is_never_called_equal_to_a_different_count(site: Path) -> None:
    """gpt-oss-20b's MXFP4 checkpoint counts 21,511,953,984 stored elements (packed fp4 pairs and scales, the Hub's
    safetensors.total) against 20,914,757,184 parameters: the page says they agree as stored, never "scalar for
    scalar", and every page that says so shows two equal numbers."""
    for model, twin in _twins(site).items():
        text = _text((site / "models" / model / "index.html").read_text(encoding="utf-8"))
        p = twin["params"]
        if "scalar for scalar" in text:
            assert p["graph"] == p["checkpoint"], model
        if "element for element" in text:
            assert p["stored"] == p["checkpoint"] != p["graph"], model
    text = _text((site / "models" / "openai" / "gpt-oss-20b" / "index.html").read_text(encoding="utf-8"))
    assert ("graph 20,914,757,184 (stored as 21,511,953,984 elements) vs checkpoint 21,511,953,984" in text)
    assert "scalar for scalar" not in text and "element for element" in text
    assert "also equals the checkpoint's count of stored elements" in text


def test_a_page_priced_as_bf16_for_a_quantised_repository_says_so_by_its_headline(site: Path) -> None:
    """The NVIDIA ModelOpt repository (FP8) whose config.json declares no quantisation and whose hf_quant_config.json
    the snapshot does not hold: the notice stands between the headline and the provenance, on that page alone (the
    two whose file it holds are priced as their export: test_quant_config_file.py)."""
    noticed = sorted(model for model in _twins(site)
                     if 'id="quantised-name"' in (site / "models" / model / "index.html").read_text(encoding="utf-8"))
    assert noticed == ["nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8"]
    html = (site / "models" / "nvidia" / "NVIDIA-Nemotron-3-Super-120B-A12B-FP8" / "index.html").read_text(
        encoding="utf-8")
    assert html.index('id="headline"') < html.index('id="quantised-name"') < html.index('id="provenance"')
    assert "The repository&#39;s name says FP8, but no quantization settings were read" in html


def test_the_cost_table_and_the_setups_table_price_a_one_gpu_job_alike(site: Path) -> None:
    """Both tables take the roofline (the longer of FLOPs over peak and bytes over bandwidth): a one-GPU setup
    costs the same in each, and where batch 1 needs gradient checkpointing on one GPU the cost table prices that
    setup rather than saying it does not fit (Mistral-7B-v0.1's LoRA on an L4: 265 h, $213.20)."""
    checked = 0
    for model, twin in _twins(site).items():
        one = {(p["method"], p["gpu_model"] or p["gpu"]): p for p in twin["plans"] if p["fits"] and p["gpus"] == 1}
        for line in twin["cost"]:
            plan = one.get((line["method"], line["card"]))
            if plan is None or plan["grad_ckpt"]:
                continue
            assert plan["job_hours"] == pytest.approx(line["hours"], rel=1e-9), (model, line["card"], line["method"])
            checked += 1
    assert checked > 500
    html = (site / "models" / "mistralai" / "Mistral-7B-v0.1" / "index.html").read_text(encoding="utf-8")
    row = _text(html.split('<th scope="row">L4</th>', 1)[1].split("</tr>", 1)[0])
    assert "265 h · $213.20with gradient checkpointing" in row and row.count("does not fit one GPU") == 1


def test_the_count_by_part_adds_up(site: Path) -> None:
    """"By part" gives each size of layer, never the largest as every layer's: the embedding, the layers and the
    head are the text model's count but for its norms and heads' small extras (under 1%). DeepSeek-V3 read "61
    layers of 11.5B each" (703.8B with its ends, against 671.0B): its first three layers are dense."""
    for model, twin in _twins(site).items():
        p = twin["params"]
        layers = sum(size * n for size, n in p["layer_sizes"])
        assert sum(n for _, n in p["layer_sizes"]) == p["layers"], model
        assert 0 <= p["text"] - p["embedding"] - p["lm_head"] - layers < 0.01 * p["text"], model
    text = _text((site / "models" / "deepseek-ai" / "DeepSeek-V3" / "index.html").read_text(encoding="utf-8"))
    assert "61 layers (3 of 583M, 58 of 11.5B), head 927M" in text
    text = _text((site / "models" / "google-t5" / "t5-base" / "index.html").read_text(encoding="utf-8"))
    assert "24 layers (12 of 7.08M, 12 of 9.44M)" in text  # the first encoder layer's relative bias: 7.08M too


def test_cheapest_says_per_what(site: Path) -> None:
    """A serving setup has no job to price: the setups table calls its cheapest "cheapest per hour", and the
    serving table marks the one row cheapest per output token, the one the headline names (llava-1.5-7b had its
    L4 marked "cheapest" at $8.67 per M tokens, where the H200 costs $0.64)."""
    for model in _twins(site):
        html = (site / "models" / model / "index.html").read_text(encoding="utf-8")
        serving = html.split('id="serving"', 1)[1] if 'id="serving"' in html else ""
        assert html.count("<small>cheapest per token</small>") == (1 if "per M tokens" in serving else 0), model
    html = (site / "models" / "llava-hf" / "llava-1.5-7b-hf" / "index.html").read_text(encoding="utf-8")
    assert "16.6 GB, smallest, cheapest per hour</small>" in html  # an L4 at vLLM's defaults there, 2,048-token steps
    assert "$0.64 per M tokens<br><small>cheapest per token</small>" in html
    assert "the cheapest per token at full load: 1× H200 SXM" in _text(html)


def test_a_dash_always_says_what_runs_instead(site: Path) -> None:
    """A model page's "—" (one card holds no batch) is followed by a two-card split, the fewest GPUs a setup holds
    it on, or their absence up to 512, never alone (Qwen3-30B-A3B's QLoRA cells had none); a card page says "n/a" where
    QLoRA does not apply (DeepSeek-V3's FP8 checkpoint), not "none up to 512"."""
    for model in _twins(site):
        html = (site / "models" / model / "index.html").read_text(encoding="utf-8")
        table = html.split("<caption>Largest batch per card and method</caption>", 1)[1].split("</table>", 1)[0]
        assert not re.search(r">—</td>", table), model
    text = _text((site / "cards" / "t4-16-gb" / "index.html").read_text(encoding="utf-8"))
    assert "deepseek-ai/DeepSeek-V3671B——n/a" in text.replace(" ", "")


def test_a_batch_cell_past_one_card_names_the_fewest_gpus_the_setups_table_fits(site: Path) -> None:
    """Where one card holds no batch and no two-card split does, the cell links the setups with the fewest GPUs of
    that card a setup fits on, as the setups table (the JSON twin's plans) has it, or says none up to the search's
    limit does: the terminal's cell says the same (setups_text.card_setups)."""
    methods = {"Full fine-tune": "full", "QLoRA": "qlora"}
    seen = set()
    for model, twin in _twins(site).items():
        html = (site / "models" / model / "index.html").read_text(encoding="utf-8")
        table = html.split("<caption>Largest batch per card and method</caption>", 1)[1].split("</table>", 1)[0]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
            card = _text(re.search(r"<th[^>]*>(.*?)</th>", row, re.S).group(1)).split(" budget")[0].strip()
            for label, split, link in re.findall(r'data-label="([^"]+)">[^<]*(<br><small>\d+ cards, [^<]*</small>)?'
                                                 r'<br><small><a href="#setups">([^<]+)</a>', row):
                method = methods.get(label) or ("lora" if label.startswith("LoRA") else "serve")
                plans = [p for p in twin["plans"] if p["method"] == method and p["gpu"] == card]
                fitting = [p["gpus"] for p in plans if p["fits"]]
                if not plans:  # serving is not searched where vLLM has no kernel for the model or refuses its
                    # quantisation (its warning)
                    assert method == "serve" and link == setups_text.NOT_SERVED, (model, card, label)
                    # a warning says why, naming this card's GPUs
                    said = [x["message"] for x in twin["findings"]
                            if x["check"] in ("sparse_attention_serving", "quantised_serving")]
                    names = [SETTINGS.gpus[k].name for c in SETTINGS.cards if c.name == card for k in c.gpus]
                    assert any(all(n in m for n in names) for m in said), (model, card)
                    seen.add("not served")
                    continue
                if split:  # beside a two-card split that holds a batch: only a setup on one GPU (checkpointed)
                    assert link == "setups: 1 GPU" and min(fitting) == 1, (model, card, label)
                    assert any(p["grad_ckpt"] or p["offload"] != "none" for p in plans if p["fits"] and p["gpus"] == 1)
                    seen.add("beside a split")
                    continue
                most = max(plans, key=lambda p: p["gpus"])
                capacity = {c["name"]: c["capacity_bytes"] for c in twin["memory"]["cards"]}[card]
                # none holds it within the budget: "tight" where the card's memory less the CUDA context holds the
                # largest setup tried, as the setups table's row and the floor sentence under it say
                want = f"setups: {f.gpu_count(min(fitting))}" if fitting else \
                    f"{'tight on' if most['per_gpu_peak_bytes'] <= capacity else 'no setup up to'} " \
                    f"{f.gpu_count(most['gpus'])}"
                assert link == want == setups_text.card_setups(twin["plans"], method, card,
                                                               capacity_bytes=capacity), (model, card, label)
                if not fitting:  # the setups table's row says it alike, a tight one with its setup
                    row_words = f"tight: {most['gpus']}×" if want.startswith("tight") else \
                        want.replace("no setup up to", "does not fit on")
                    assert f'data-label="{setups_text.METHOD_NAMES[method]}">{row_words}' \
                        in html[html.index('id="plans"'):], (model, card, label)
                seen.add(want.split(":")[0])
    assert seen == {"setups", "no setup up to 512 GPUs", "tight on 512 GPUs", "beside a split", "not served"}


def test_small_words_read_right(site: Path) -> None:
    """A family of one model says "1 model"; a chart whose series does not move says so, never "from 4.46 GB ...
    to 4.46 GB"; a preset config's notice promises only what its source line can say."""
    assert "1 models" not in _text((site / "families" / "kimi_k2" / "index.html").read_text(encoding="utf-8"))
    t5 = (site / "models" / "google-t5" / "t5-base" / "index.html").read_text(encoding="utf-8")
    assert "Full fine-tune 4.46 GB at every length;" in t5
    for model in _twins(site):
        text = _text((site / "models" / model / "index.html").read_text(encoding="utf-8"))
        assert not re.search(r"from ([\d.,]+ [MGT]?B) at [\d,]+ tokens to \1 at", text), model
        assert "the source below says what differs" not in text, model


def test_no_page_shows_a_path_of_the_project_itself(site: Path) -> None:
    """Item 10: the tiny models' config notes once pointed at reference-pages/...txt."""
    for page in site.rglob("*"):
        if page.suffix in (".html", ".txt", ".xml", ".json"):
            text = page.read_text(encoding="utf-8")
            assert "reference-pages/" not in text and "/work/" not in text and "gpu-and-hub-facts" not in text, page
    tiny = (site / "models" / "trl-internal-testing" / "tiny-Qwen2ForCausalLM-2.5" / "index.html").read_text()
    assert "Config: reconstructed [from the shape published for this model" in tiny


def test_unknown_values_say_so_and_sort_apart(site: Path) -> None:
    """Item 11: no "vs checkpoint —"; models without a download count follow the counted ones apart."""
    for model, twin in _twins(site).items():
        html = (site / "models" / model / "index.html").read_text(encoding="utf-8")
        want = "not known" if twin["params"]["checkpoint"] is None else f.count(twin["params"]["checkpoint"])
        assert f"vs checkpoint <strong>{want}</strong>" in html, model
    records = {r.id: r for r in iter_records(DEFAULT_SNAPSHOT_DIR) if not hasattr(r, "reason")}
    unknown = sorted(m for m, r in records.items() if r.downloads is None)
    assert "google-bert/bert-base-uncased" in unknown
    home = (site / "index.html").read_text(encoding="utf-8")
    counted, apart = home.split('<tbody class="unknown">')
    assert f"Download count not known ({len(unknown)} models, by name)" in apart
    listed = re.findall(r'<th scope="row"><a href="[^"]*">([^<]*)</a>', apart)
    assert listed == unknown
    downloads = [c for c in re.findall(r'data-label="Downloads">([^<]*)<', apart)]
    assert set(downloads) == {"not known"}
    assert "not known" not in re.findall(r'data-label="Downloads">([^<]*)<', counted)
    t4 = (site / "cards" / "t4-16-gb" / "index.html").read_text(encoding="utf-8")
    assert "bert-base-uncased" in t4.split('<tbody class="unknown">')[1]


def test_the_feed_and_changes_are_dated_from_the_snapshot(site: Path) -> None:
    """Item 12: the newest day a record's Hub data was read (2026-05-17 in downloads_source), not 1970."""
    feed = (site / "feeds" / "models.atom.xml").read_text(encoding="utf-8")
    assert "1970" not in feed
    assert "<updated>2026-05-17T00:00:00Z</updated>" in feed
    assert "2026-05-17" in (site / "changes" / "index.html").read_text(encoding="utf-8")


def test_snapshot_date_reads_the_crawl_day_and_never_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    entry = listing.Entry("a/b", None, None, None, None, None, None, "x")
    assert changes.snapshot_date([entry]) == changes.EPOCH
    read = listing.Entry("a/b", None, None, None, None, None, None, "x",
                         read_date=f.latest_day("Hub API field downloads (rolling 30-day count) on 2026-11-02"))
    modified = listing.Entry("c/d", None, None, None, None, None, None, "x", last_modified="2026-10-01T08:00:00Z")
    assert changes.snapshot_date([read, modified]) == "2026-11-02T00:00:00Z"
    assert f.latest_day("saved 2025-09-23; scraped around 2026-05-17, not 2026-13-45") == "2026-05-17T00:00:00Z"
    assert f.latest_day(None) is None and f.latest_day("sha 2026abc") is None


def test_every_citation_on_the_site_is_explained_on_the_sources_page(site: Path) -> None:
    """Item 13: [SILY], [AWS-SKY] and every other key a page shows link to their entry on /sources/."""
    sources = (site / "sources" / "index.html").read_text(encoding="utf-8")
    entries = set(re.findall(r'<dt id="src-([A-Z0-9-]+)">', sources))
    assert {"SILY", "AWS-SKY", "LAMBDA-YML"} <= entries
    shown = set()
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        for key in re.findall(r"\[([A-Z][A-Z0-9-]+)\]", _text(html)):
            shown.add(key)
            assert key in entries, (page, key)
        for key in re.findall(r'sources/index\.html#src-([A-Z0-9-]+)"', html):
            assert key in entries
    assert {"SILY", "AWS-SKY"} <= shown
    gpt2 = (site / "models" / "openai-community" / "gpt2" / "index.html").read_text(encoding="utf-8")
    assert '<a href="../../../sources/index.html#src-SILY"' in gpt2
    assert "docs/sources.md" not in DEFAULT_CONFIG.read_text(encoding="utf-8")


def test_a_citation_without_a_source_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    data["gpus"]["h200"]["price_source"] = "somewhere [NOWHERE]"
    path = tmp_path / "site_config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError, match="NOWHERE"):
        load_settings(path)
    for g in SETTINGS.gpus.values():
        assert set(cited(g.price_source + g.spec_source)) <= set(SETTINGS.sources)


def test_every_cell_that_fits_on_no_count_has_its_floor_on_the_page(site: Path) -> None:
    """A model page whose setups table says "does not fit on 512 GPUs" (or "tight on") for a training method says why
    under the table (setups_text.floor_sentences), once per method, and what data parallelism leaves whole, once."""
    seen = 0
    for page in sorted((site / "models").glob("*/*/index.html")):
        html = page.read_text(encoding="utf-8")
        start = html.index('id="plans"')
        table = html[start:html.index("</table>", start)]
        over = [label for label in ("Full fine-tune", "LoRA", "QLoRA")
                if re.search(rf'data-label="{label}">(does not fit on \d+ GPUs|tight: \d+×)', table)]
        for label in over:
            assert html.count(f'<p class="note">{label}: no count of ') == 1, (page, label)
        assert html.count("ZeRO and FSDP divide the weights") == (1 if over else 0), page
        seen += len(over)
    assert seen >= 40


def test_the_parts_line_says_whether_there_is_an_lm_head_and_whether_it_is_tied(site: Path) -> None:
    """A page review found bge-reranker-large (a sequence classifier) said to have a "head tied to the embedding":
    the template read an LM head of 0 parameters as tied. Params.lm_head_tied now says so, and a model with no LM
    head says that; BERT's tied head keeps its own bias."""
    said = {}
    for model in ("BAAI/bge-reranker-large", "Qwen/Qwen3-0.6B", "google-bert/bert-base-uncased"):
        text = _text((site / "models" / model / "index.html").read_text(encoding="utf-8"))
        said[model] = text[text.index("By part:"):].split(". ")[0]
    assert said["BAAI/bge-reranker-large"].endswith("24 layers of 12.6M each, no LM head")
    assert said["Qwen/Qwen3-0.6B"].endswith("each, head tied to the embedding")
    assert said["google-bert/bert-base-uncased"].endswith("each, head tied to the embedding, 30.5K of its own")
