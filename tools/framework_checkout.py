"""A framework's own model code imported from its checkout, and its simulated runs written (sim_litgpt, sim_torchtune).

The checkout is read at run time, never a dependency of the project. Its package is made importable without running
its `__init__` (LitGPT's starts its API, torchtune's insists on torchao), and the packages its utilities import at
module level but the simulated step never runs (Lightning, data loaders, tokenizers) are empty stand-ins: any name
read from one is a class that takes any arguments, returns its first argument when called (a decorator) and can be
subscripted (a generic alias), so a module that only mentions them imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from generator.hub.snapshot import load_record  # the callers put the project on sys.path first
from generator.measure.record import dumps
from generator.records import parse_config_text

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshot"


def _stand_in_class(name: str) -> type:
    return type(name, (), {"__init__": lambda self, *args, **kwargs: None,
                           "__call__": lambda self, *args, **kwargs: args[0] if args else None,
                           "__class_getitem__": classmethod(lambda cls, item: cls)})


class StandInModule(types.ModuleType):
    """An empty module: every public name is a stand-in class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in_class(name)


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds every module under the top-level packages `names` and makes it a StandInModule."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def load_package(checkout: Path, package: str, stand_ins: Iterable[str]) -> None:
    """Make `package.*` importable from `checkout` (the folder holding package/) without its __init__, with
    `stand_ins` in place of the packages its model code imports but the step does not run."""
    sys.meta_path.insert(0, StandIns(stand_ins))
    module = types.ModuleType(package)
    module.__path__ = [str(checkout / package)]
    sys.modules[package] = module


def shrunk_config(repo_id: str, layers: int) -> dict:
    """The snapshot's config.json of `repo_id` cut to its first `layers` layers, as the simulations run it."""
    record = load_record(SNAPSHOT, repo_id)
    if record is None:
        raise SystemExit(f"{repo_id}: not in the snapshot")
    config = parse_config_text(record.config_json, repo_id)
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:layers]
    return config


def write_sweep(runs: Sequence[tuple], record: Callable[..., dict], out: Path, checkout: str,
                describe: Callable[[tuple], str]) -> None:
    """`record(*run, checkout=checkout)` of every run as one JSON line of `out` (the harness's record format), each
    run's error against the estimate printed as it is made."""
    lines = []
    for run in runs:
        row = record(*run, checkout=checkout)
        lines.append(dumps(row))
        error = (row["estimate"]["peak_bytes"] - row["measured"]["peak_bytes"]) / row["measured"]["peak_bytes"]
        print(f"{describe(run)}: {error * 100:+.2f}%", flush=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
