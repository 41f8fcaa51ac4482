"""The model pages' calculator, build side: what each page carries and the files every page shares.

The calculator runs the estimator itself in the browser (Pyodide), so the page's number is the CLI's: the
same job_flags parser reads the page's query, the same estimate() prices it (generator/calculator.py). A
page carries only its own inputs: its model id and its config.json as the estimator reads it, inline. Every
page shares, once per site and cached across pages:

- static/calc.js, the page's script (templates/static/calc.js);
- static/calc/site.json: the site's assumptions, cards and GPUs, the form's flags (read from the parser),
  and the names of the two files below; fetched with revalidation, small;
- static/calc/estimator-<hash>.zip: the pure modules (generator/estimator/**, errors, format, job_flags,
  calculator, a two-line generator/__init__), byte for byte the same for the same sources;
- static/pyodide/<version>/: the Pyodide runtime from node_modules/pyodide (npm, pinned in package.json and
  package-lock.json; `make install` runs `npm ci`), only the files it loads, and its lock file without the
  package list (the calculator installs no package).

Without node_modules/pyodide the build goes on: site.json says the runtime is missing, the page says the
calculator is not available on this copy of the site, its static figures stay, and the build summary says so.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import tokenize
import zipfile
from pathlib import Path
from typing import Any

from markupsafe import Markup

from .. import __version__, calculator
from .. import format as f
from ..estimator import Report
from ..settings import Settings

PYODIDE_VERSION = "314.0.8"  # package.json pins the same (tests/test_calculator.py checks)
_ROOT = Path(__file__).resolve().parents[2]
PYODIDE_DIR = _ROOT / "node_modules" / "pyodide"  # npm ci's copy; absent in a wheel install
_PACKAGE = Path(__file__).resolve().parents[1]

SCRIPT = "static/calc.js"
SITE_JSON = "static/calc/site.json"
CALC_DIR = "static/calc"
RUNTIME_DIR = f"static/pyodide/{PYODIDE_VERSION}"
# What loadPyodide fetches: the loader, the Emscripten module, the WebAssembly binary, the standard library
# and the lock file (trimmed to its header). pyodide.js (the classic-script loader), the source maps, the
# consoles and the type declarations are not loaded.
RUNTIME_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip")
LOCK_FILE = "pyodide-lock.json"

# The modules the browser imports, relative to generator/; generator/__init__.py is written anew (the version).
SHIPPED = ("errors.py", "format.py", "job_flags.py", "calculator.py", "estimator")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: the same bytes on every build
# What the shipped modules may import besides each other: the standard library modules Pyodide's
# python_stdlib.zip holds that do no I/O of their own.
ALLOWED_IMPORTS = frozenset({"__future__", "argparse", "bisect", "collections.abc", "contextlib", "dataclasses",
                             "datetime", "functools", "io", "itertools", "json", "math", "operator", "re", "shlex",
                             "typing", "urllib.parse"})
MISSING = ("calculator not built: node_modules/pyodide is missing (run `make install`, which runs `npm ci`); "
           "model pages keep their static figures and say the calculator is not available")


def runtime_available(directory: Path | None = None) -> bool:
    d = PYODIDE_DIR if directory is None else directory
    return all((d / name).is_file() for name in (*RUNTIME_FILES, LOCK_FILE))


def _shipped_files() -> list[tuple[str, Path]]:
    """(name in the zip, source file) for every shipped module, sorted by name."""
    found: list[tuple[str, Path]] = []
    for rel in SHIPPED:
        path = _PACKAGE / rel
        if path.is_dir():
            found += [(f"generator/{p.relative_to(_PACKAGE).as_posix()}", p) for p in path.rglob("*.py")
                      if "__pycache__" not in p.parts]
        else:
            found.append((f"generator/{rel}", path))
    return sorted(found)


def module_imports(name: str, source: str) -> set[str]:
    """The absolute names a shipped module imports (relative imports resolved against its package)."""
    package = name[: -len(".py")].replace("/", ".")
    if not name.endswith("__init__.py"):
        package = package.rsplit(".", 1)[0]
    else:
        package = package[: -len(".__init__")]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
            else:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                found.add(".".join(base + ([node.module] if node.module else [])))
    return found


def check_imports(files: dict[str, str]) -> None:
    """Every import of a shipped module is the standard library's (ALLOWED_IMPORTS) or another shipped
    module: raises ValueError naming the module and the import otherwise."""
    modules = {n[: -len(".py")].replace("/", ".").removesuffix(".__init__") for n in files}
    for name, source in files.items():
        for imported in module_imports(name, source):
            if imported in ALLOWED_IMPORTS or imported in modules:
                continue
            raise ValueError(f"{name} imports {imported}, which the calculator's zip does not hold "
                             "(only the standard library and the shipped modules)")


# A statement that is a string alone, once its line's tokens before it are only indentation: a docstring.
_STATEMENT_STARTS = frozenset({tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING})


def browser_source(source: str) -> str:
    """A module as the browser runs it: its comments dropped and its docstrings emptied, every code line
    unchanged and on its own line number, so a traceback in the calculator points where the checkout's does.
    What it keeps is what the interpreter reads; a third of the zip's bytes were the prose around it.
    (No shipped module reads a __doc__: tests/test_calculator.py checks.)"""
    lines = source.splitlines(keepends=True)
    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    previous = tokenize.NEWLINE
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    code = [t for t in tokens if t.type != tokenize.COMMENT]
    after = {id(t): code[i + 1] for i, t in enumerate(code[:-1])}  # past a comment on the same line
    for token in tokens:
        following = after.get(id(token), token)
        if token.type == tokenize.COMMENT:
            edits.append((token.start, token.end, ""))
        elif (token.type == tokenize.STRING and previous in _STATEMENT_STARTS
              and following.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
              and not token.string.lstrip("rRbBuU").startswith(("f", "F"))):
            breaks = token.string.count("\n")
            edits.append((token.start, token.end, '""' if not breaks else '"""' + "\n" * breaks + '"""'))
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    for (row, col), (end_row, end_col), text in reversed(edits):
        head, tail = lines[row - 1][:col], lines[end_row - 1][end_col:]
        lines[row - 1:end_row] = [(head + text).rstrip(" ") + tail if not text else head + text + tail]
    return "".join(lines)


@functools.lru_cache(maxsize=1)
def estimator_zip() -> bytes:
    """The pure modules as one zip: entries sorted, dates fixed, so the same sources give the same bytes;
    each module as browser_source gives it."""
    files = {name: browser_source(path.read_text(encoding="utf-8")) for name, path in _shipped_files()}
    files["generator/__init__.py"] = (f'"""neurarch-trace\'s estimator, as the model pages\' calculator runs it."""\n\n'
                                      f"__version__ = {__version__!r}\n")
    check_imports(files)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            info.create_system = 3  # unix, whatever the build machine
            z.writestr(info, files[name].encode("utf-8"), compresslevel=9)
    return buffer.getvalue()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def zip_name() -> str:
    return f"estimator-{_digest(estimator_zip())}.zip"


def site_json(settings: Settings, available: bool) -> str:
    data = calculator.site_data(settings.assumptions, settings.cards, settings.gpus)
    data.update(estimator=zip_name(), pyodide=f"../pyodide/{PYODIDE_VERSION}/" if available else None)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    for char in "<>&'":  # as every JSON file the site serves: these only inside strings, \\u-escaped
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text + "\n"


def _trimmed_lock(directory: Path) -> str:
    """pyodide-lock.json's header with no packages: loadPyodide reads it; the calculator loads no package."""
    lock = json.loads((directory / LOCK_FILE).read_text(encoding="utf-8"))
    return json.dumps({"info": lock["info"], "packages": {}}, sort_keys=True, separators=(",", ":")) + "\n"


def assets_key(settings: Settings) -> str:
    """What the shared files are made of (the render key includes it): the shipped modules, site.json and
    whether the runtime is there."""
    available = runtime_available()
    return _digest(estimator_zip() + site_json(settings, available).encode() + bytes([available]))


def write_assets(writer: Any, settings: Settings, script: str) -> bool:
    """The shared files (the module docstring's list) into the site, `script` being static/calc.js's text;
    returns whether the runtime is in."""
    available = runtime_available()
    writer.write(SCRIPT, script)
    writer.write(SITE_JSON, site_json(settings, available))
    writer.write_bytes(f"{CALC_DIR}/{zip_name()}", estimator_zip())
    if available:
        for name in RUNTIME_FILES:
            writer.copy(f"{RUNTIME_DIR}/{name}", PYODIDE_DIR / name)
        writer.write(f"{RUNTIME_DIR}/{LOCK_FILE}", _trimmed_lock(PYODIDE_DIR))
    return available


# A config.json up to this size is inline in its page; a larger one (a per-layer block list, a long list of
# unquantised modules, a multimodal wrapper's nested configs) is a file beside the page, config.json, fetched
# when the calculator is used, so that no page passes its 60 kB budget for its calculator's sake. Most decoder
# configs are 1-2 kB; the largest pages (VLMs, deep MoEs) carry 2-4 kB ones.
INLINE_MAX = 2_000
CONFIG_FILE = "config.json"


def _safe_json(value: Any) -> str:
    """JSON safe inside a <script> element: ASCII, and no raw `<`, `>`, `&` or `'` (they occur only inside
    strings, where \\u003c is the same value). Keys keep the config's order, as the estimator reads it."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    for char in "<>&'":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def config_file(config: dict[str, Any]) -> str | None:
    """The text of the config file beside the page, for a config too large to be inline (None otherwise)."""
    text = _safe_json(config)
    return text + "\n" if len(text) > INLINE_MAX else None


def model_files(folder: str, config: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The files beside a model's page that its calculator reads: config.json when it is not inline."""
    text = config_file(config)
    return () if text is None else ((f"{folder}/{CONFIG_FILE}", text),)


def page_context(report: Report, config: dict[str, Any], root: str) -> dict[str, Any]:
    """What _calculator.html places: the script, the page's inputs, and the figure shown before (or
    without) JavaScript: the site's full fine-tune at batch 1, which is the CLI's peak with no flags."""
    mem = report.memory
    inline = config_file(config) is None
    inputs = {"id": report.model.id, "config": config} if inline else {"id": report.model.id}
    return {"script": root + SCRIPT, "model_json": Markup(_safe_json(inputs)),
            "config_file": None if inline else CONFIG_FILE,
            "peak_bytes": str(mem.train_full_bytes_batch1), "peak": f.gb(mem.train_full_bytes_batch1),
            "tokens": f.count(mem.train_tokens), "command": calculator.command(report.model.id, [])}
