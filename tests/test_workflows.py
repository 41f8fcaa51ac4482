"""The GitHub workflows, checked offline against the schema vendored in check-jsonschema, plus what they run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"
CI, NIGHTLY = WORKFLOWS / "ci.yml", WORKFLOWS / "nightly.yml"


def _validate(*paths: Path) -> subprocess.CompletedProcess:
    # The vendored schema ships inside the package: no download, no network.
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           *map(str, paths)], capture_output=True, text=True, timeout=120)


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as a boolean
    return data


def _runs(data: dict) -> list[str]:
    return [step.get("run", "") for job in data["jobs"].values() for step in job.get("steps", [])]


def _uses(data: dict) -> dict[str, dict]:
    return {step["uses"].split("@")[0]: step.get("with", {}) for job in data["jobs"].values()
            for step in job.get("steps", []) if "uses" in step}


def test_both_workflows_match_the_github_workflow_schema(tmp_path):
    result = _validate(CI, NIGHTLY)
    assert result.returncode == 0, result.stdout + result.stderr
    # The validator is live: a workflow with a misspelt key is refused.
    broken = tmp_path / "broken.yml"
    broken.write_text(CI.read_text().replace("runs-on:", "runs_on:"))
    assert _validate(broken).returncode != 0


def test_ci_runs_the_readme_test_command_on_push_and_pull_request():
    ci = _load(CI)
    assert {"push", "pull_request"} <= set(ci["on"])
    assert any(run.strip().splitlines()[-1:] == ["make test"] for run in _runs(ci))


def test_nightly_crawls_builds_and_deploys_with_caches_and_a_problem_threshold():
    nightly = _load(NIGHTLY)
    assert nightly["on"]["schedule"][0]["cron"] and "workflow_dispatch" in nightly["on"]
    runs = "\n".join(_runs(nightly))
    assert runs.index("make crawl") < runs.index("make build")
    # The build itself fails (exit 1, previous public/ kept) above the threshold: --max-problems.
    assert "MAX_PROBLEM_PERCENT" in runs and "--max-problems" in runs and "pipefail" in runs
    assert 0 < int(nightly["env"]["MAX_PROBLEM_PERCENT"]) < 100
    uses = _uses(nightly)
    cached = uses["actions/cache/restore"]["path"].split()
    # public/ too: the incremental build and the changes feed compare against the previous site.
    assert cached == ["snapshot", "public", "~/.cache/huggingface"] == uses["actions/cache/save"]["path"].split()
    assert uses["actions/upload-pages-artifact"]["path"] == "public/"
    assert "actions/deploy-pages" in uses
    deploy = nightly["jobs"]["deploy"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
