// The model page's calculator: the estimator itself (generator/calculator.py) run by Pyodide in this page.
// This script holds no formula and no list of flags: the form's fields come from site.json, which the build
// reads from the CLI's own parser (generator/job_flags.py), and every number and text comes from Python.
// The setup lives in the address (?method=lora&grad-ckpt=1: the CLI's flag names); window.neurarchCalc.run
// computes one (tests/test_calculator_browser.py drives it).
const $ = (id) => document.getElementById(id);
const here = new URL(".", import.meta.url); // static/
const form = $("calc-form"), peak = $("calc-peak"), what = $("calc-what"), details = $("calc-details");
const status = $("calc-status"), cmd = $("calc-command"), copy = $("calc-copy");
const modelText = $("calc-model").textContent;
let site, siteText, runner, timer;

function say(text) { status.textContent = text; }

function el(tag, text, attrs = {}) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function buildForm(flags, params) {
  const groups = new Map();
  for (const flag of flags) {
    if (!groups.has(flag.group)) {
      const fs = el("fieldset"); fs.append(el("legend", flag.group[0].toUpperCase() + flag.group.slice(1)));
      groups.set(flag.group, fs); form.append(fs);
    }
    const id = "calc-" + flag.key, help = id + "-help";
    const row = el("div", null, { class: flag.kind === "switch" ? "calc-field switch" : "calc-field" });
    const label = el("label", flag.key, { for: id });
    let input;
    if (flag.kind === "choice") {
      input = el("select", null, { id, name: flag.key });
      input.append(el("option", "default", { value: "" }));
      for (const c of flag.choices) input.append(el("option", c, { value: c }));
    } else if (flag.kind === "switch") {
      input = el("input", null, { id, name: flag.key, type: "checkbox", value: "1" });
    } else {
      input = el("input", null, flag.kind === "int"
        ? { id, name: flag.key, type: "number", min: "0", step: "1", inputmode: "numeric", placeholder: "default" }
        : { id, name: flag.key, type: "text", placeholder: "default", spellcheck: "false" });
    }
    input.setAttribute("aria-describedby", help);
    const value = params.get(flag.key);
    if (value !== null) {
      if (flag.kind === "switch") input.checked = ["1", "true", "on", "yes"].includes(value.trim().toLowerCase());
      else input.value = value;
    }
    if (flag.kind === "switch") row.append(input, " ", label); else row.append(label, input);
    row.append(el("small", flag.help || flag.flag, { id: help }));
    groups.get(flag.group).append(row);
  }
  form.hidden = false;
}

function formQuery() {
  const q = new URLSearchParams();
  for (const flag of site.flags) {
    const input = form.elements[flag.key];
    if (!input) continue;
    if (flag.kind === "switch") { if (input.checked) q.append(flag.key, "1"); }
    else if (input.value.trim() !== "") q.append(flag.key, input.value.trim());
  }
  return q.toString();
}

async function loadRunner() {
  if (runner) return runner;
  runner = (async () => {
    if (!site.pyodide) throw new Error("the calculator is not available on this copy of the site (its Python runtime was not built in)");
    say("Loading the estimator (Python in WebAssembly, once per site)…");
    const started = performance.now();
    const base = new URL("calc/" + site.pyodide, here);
    const { loadPyodide } = await import(new URL("pyodide.mjs", base).href);
    const [py, zip] = await Promise.all([
      loadPyodide({ indexURL: base.href }),
      fetch(new URL("calc/" + site.estimator, here)).then((r) => {
        if (!r.ok) throw new Error("estimator " + r.status);
        return r.arrayBuffer();
      }),
    ]);
    py.FS.writeFile("/neurarch-calc.zip", new Uint8Array(zip));
    py.runPython("import sys; sys.path.insert(0, '/neurarch-calc.zip')");
    const run = py.pyimport("generator.calculator").run_page;
    const file = $("calc-model").dataset.config; // a large config.json is beside the page, not in it
    const config = file ? await fetch(new URL(file, location.href)).then((r) => {
      if (!r.ok) throw new Error("config.json " + r.status);
      return r.text();
    }) : undefined; // undefined reaches Python as None (null would be pyodide's jsnull)
    window.neurarchCalc.loadMs = Math.round(performance.now() - started);
    return (query) => JSON.parse(run(modelText, siteText, query, config));
  })();
  return runner;
}

function table(caption, heads, rows) {
  const t = el("table", null, { class: "calc-table" });
  t.append(el("caption", caption));
  const head = el("tr");
  heads.forEach((h, i) => head.append(el("th", h, i ? { scope: "col", class: "num" } : { scope: "col" })));
  t.append(el("thead")); t.tHead.append(head);
  const body = el("tbody");
  for (const r of rows) {
    const tr = el("tr");
    r.forEach((c, i) => tr.append(i ? el("td", c, { class: "num" }) : el("th", c, { scope: "row" })));
    body.append(tr);
  }
  t.append(body);
  return t;
}

function show(r) {
  cmd.textContent = r.command;
  details.replaceChildren();
  if (!r.ok) {
    peak.textContent = "—"; peak.removeAttribute("data-bytes");
    what.textContent = "";
    say(r.error);
    return;
  }
  peak.textContent = r.peak; peak.dataset.bytes = String(r.peak_bytes);
  what.textContent = "during " + r.peak_phase + " (" + r.job_text + ")";
  details.append(
    table("What the peak is made of", ["Part", "At the peak"], r.breakdown.map((b) => [b.label, b.text])),
    table("This setup on each card" + (r.held ? " (" + r.held + ")" : ""), ["Card", "Budget", "Fits", "Largest batch"],
      r.cards.map((c) => [c.name, c.budget, c.fits ? "yes" : "no", c.max_batch_text])));
  say(r.ignored.length ? "Not a setting, left out: " + r.ignored.join(", ") : "Computed in this page by the estimator.");
}

async function compute(query) {
  const run = await loadRunner();
  const r = run(query);
  const url = new URL(location.href);
  url.search = r.query;
  history.replaceState(null, "", url);
  show(r);
  return r;
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(() => compute(formQuery()).catch((e) => say(String(e.message || e))), 200);
}

async function start() {
  const response = await fetch(new URL("calc/site.json", here), { cache: "no-cache" });
  siteText = await response.text();
  site = JSON.parse(siteText);
  if (site.format !== 1) throw new Error("site.json format " + site.format);
  const params = new URLSearchParams(location.search);
  buildForm(site.flags, params);
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  form.addEventListener("submit", (e) => { e.preventDefault(); schedule(); });
  form.addEventListener("focusin", () => loadRunner().then(() => say("Ready: change a setting."), (e) => say(String(e.message || e))), { once: true });
  copy.hidden = false;
  copy.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(cmd.textContent); say("Copied: " + cmd.textContent); }
    catch { getSelection().selectAllChildren(cmd); say("Selected: press Ctrl+C (or ⌘C) to copy."); }
  });
  say(site.pyodide ? "Change a setting to compute it here." : "The calculator is not available on this copy of the site (its Python runtime was not built in); the figures above are the site's setup.");
  if ([...params.keys()].length) return compute(params.toString());
}

window.neurarchCalc = { run: (query) => compute(query) };
window.neurarchCalc.ready = start().catch((e) => { say(String(e.message || e)); throw e; });
