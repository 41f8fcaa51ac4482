"""The house rules of the README's contributing section, each held here: names that say what a module holds,
module sizes, class names of words, no module writing into another's table, no function-level imports in the
estimator, and the estimator's layer order."""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "generator"
ESTIMATOR = PACKAGE / "estimator"
MODULES = sorted(PACKAGE.rglob("*.py"))

SOFT_LIMIT, HARD_LIMIT = 400, 500
# A module may grow past SOFT_LIMIT (to HARD_LIMIT at most) only when listed here with the reason.
OVER_SOFT_LIMIT: dict[str, str] = {}


def _name(path: Path) -> str:
    if not path.is_relative_to(ROOT):
        return path.stem
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _generated_by(path: Path) -> Path | None:
    """The tools/ script that makes a generated module, when its first lines say so and the script exists."""
    head = "\n".join(path.read_text(encoding="utf-8").splitlines()[:5])
    script = re.search(r"tools/[\w/]+\.py", head)
    if "generated" not in head.lower() or script is None:
        return None
    return ROOT / script.group(0) if (ROOT / script.group(0)).is_file() else None


def test_every_module_is_named_for_what_it_holds():
    bad = [_name(p) for p in MODULES if re.search(r"(^|_)(misc|more|other|stuff|utils?\d*|helpers?)(_|$)|\d$", p.stem)]
    assert bad == []


def test_modules_stay_under_400_lines_and_500_at_most():
    over_soft, over_hard = [], []
    for path in MODULES:
        lines = path.read_text(encoding="utf-8").count("\n")
        if _generated_by(path) is not None:
            continue
        if lines > HARD_LIMIT:
            over_hard.append(f"{_name(path)} ({lines})")
        elif lines > SOFT_LIMIT and _name(path) not in OVER_SOFT_LIMIT:
            over_soft.append(f"{_name(path)} ({lines})")
    assert over_hard == [] and over_soft == []


def test_a_generated_module_says_so_and_names_the_script_that_makes_it():
    defaults = ESTIMATOR / "config" / "transformers_defaults.py"
    assert _generated_by(defaults) == ROOT / "tools" / "write_transformers_defaults.py"
    assert _generated_by(ESTIMATOR / "estimate.py") is None


def _class_offenders() -> list[str]:
    return [f"{_name(path)}.{node.name}" for path in MODULES for node in ast.walk(_tree(path))
            if isinstance(node, ast.ClassDef) and len(node.name.strip("_")) < 2]


def test_classes_have_words_for_names():
    assert _class_offenders() == []


_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "append", "extend", "insert", "remove"}


def _writes_into_imported_tables(path: Path) -> list[str]:
    """Subscript assignment, deletion or a mutating method on a name imported from another module
    (`from x import TABLE; TABLE[k] = v`, `TABLE.update(...)`) or on a module's attribute (`x.TABLE[k] = v`)."""
    tree = _tree(path)
    imported, modules = set(), set()
    for node in ast.walk(tree):  # the project's own modules and names (os.environ and the like are not tables)
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("generator")):
            for alias in node.names:
                (modules if node.module is None else imported).add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name.startswith("generator"))

    def foreign(target: ast.expr) -> bool:
        if isinstance(target, ast.Name):
            return target.id in imported
        return (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id in modules | imported)

    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and foreign(target.value):
                found.append(f"{_name(path)}:{node.lineno} {ast.unparse(target)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
                and foreign(node.func.value)):
            found.append(f"{_name(path)}:{node.lineno} {ast.unparse(node.func)}")
    return found


def test_no_module_writes_into_another_modules_table():
    assert [w for path in MODULES for w in _writes_into_imported_tables(path)] == []


def test_the_table_check_sees_a_write(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom generator.families import TRAITS\nfrom . import llama\nTRAITS['x'] = 1\n"
                     "llama.BUILDERS.update({})\nos.environ.setdefault('A', 'b')\n", encoding="utf-8")
    assert len(_writes_into_imported_tables(probe)) == 2


def test_the_estimator_has_no_function_level_imports():
    found = []
    for path in sorted(ESTIMATOR.rglob("*.py")):
        tree = _tree(path)
        top = {id(node) for node in tree.body}
        found += [f"{_name(path)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top]
    assert found == []


# The estimator's one way through: graph/ and config/ (and inputs.py, the job's plain data) -> families/ ->
# normalise -> memory/ -> the estimate level. A module imports from its own level or below, never above.
_ESTIMATE_LEVEL = ("estimate", "report", "cost", "checks", "checkpoint")


def _level(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["generator", "estimator"] or len(parts) < 3:
        return None
    first = parts[2]
    if first in ("graph", "config", "inputs"):
        return 0
    return {"families": 1, "normalise": 2, "memory": 3}.get(first, 4 if first in _ESTIMATE_LEVEL else None)


def _estimator_imports(path: Path) -> list[tuple[int, str]]:
    name = _name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            prefix = ".".join(base + ([node.module] if node.module else []))
            targets = [prefix] if node.module else [f"{prefix}.{a.name}" for a in node.names]
            out += [(node.lineno, t) for t in targets]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _layer_violations() -> list[str]:
    found = []
    for path in sorted(ESTIMATOR.rglob("*.py")):
        own = _level(_name(path))
        if own is None:
            continue
        for line, target in _estimator_imports(path):
            theirs = _level(target)
            if theirs is not None and theirs > own:
                found.append(f"{_name(path)}:{line} imports {target}")
    return found


def test_the_estimator_layers_import_only_downwards():
    assert _layer_violations() == []


def test_the_layer_check_reads_relative_imports():
    levels = {t: _level(t) for _, t in _estimator_imports(ESTIMATOR / "estimate.py")}
    assert levels.get("generator.estimator.memory.job_result") == 3 and levels.get("generator.estimator.checks") == 4
    assert {_level(t) for _, t in _estimator_imports(ESTIMATOR / "families" / "llama.py")} - {None} == {0, 1}


def test_normalise_is_the_only_importer_of_the_families():
    importers = {_name(path) for path in MODULES if not _name(path).startswith("generator.estimator.families")
                 for _, target in _imports_of(path) if target.startswith("generator.estimator.families")}
    assert importers == {"generator.estimator.normalise"}


def _imports_of(path: Path) -> list[tuple[int, str]]:
    """Every import of a module (function-level ones included) as absolute module names."""
    return _estimator_imports(path)


def test_no_import_cycles_in_the_package():
    modules = {_name(p): p for p in MODULES}

    def owner(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph = {name: {o for _, t in _imports_of(path) if (o := owner(t)) and o != name and not name.startswith(o + ".")}
             for name, path in modules.items()}
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
