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
    assert "MAX_PROBLEM_PERCENT" in runs and "--max-problems" in runs and "PIPESTATUS" in runs
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


def _step(data: dict, name_starts: str) -> dict:
    return next(step for job in data["jobs"].values() for step in job.get("steps", [])
                if step.get("name", "").startswith(name_starts))


def _run_step(step: dict, tmp_path: Path, make_exit: int, env: dict | None = None) -> subprocess.CompletedProcess:
    """The step's script as GitHub runs it (`shell: bash`: bash -eo pipefail), with a fake make that
    prints its arguments and exits make_exit."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "make"
    fake.write_text(f'#!/bin/bash\necho "make $*"\nexit {make_exit}\n')
    fake.chmod(0o755)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    summary = tmp_path / "summary.md"
    summary.write_text("")
    (tmp_path / "snapshot").mkdir(exist_ok=True)
    (tmp_path / "snapshot" / "index.json").write_text('{"format": 1, "models": [{"id": "a/b"}]}')
    run_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GITHUB_STEP_SUMMARY": str(summary), **(env or {})}
    run_env = {k: v.replace("${{ steps.pages.outputs.base_url }}", "https://o.github.io/r") for k, v in run_env.items()}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path,
                          env=run_env, capture_output=True, text=True, timeout=60)


def test_nightly_fails_when_the_crawl_or_the_build_fails_and_keeps_the_log(tmp_path):
    nightly = _load(NIGHTLY)
    assert nightly["defaults"]["run"]["shell"] == "bash"  # -eo pipefail: `make ... | tee` fails with make
    crawl = _step(nightly, "Crawl the Hub")
    for code in (1, 0):
        done = _run_step(crawl, tmp_path, code)
        assert (done.returncode != 0) == (code != 0), done.stderr
        assert "make crawl" in (tmp_path / "summary.md").read_text()
    build = _step(nightly, "Build the site")
    env = {**nightly["env"], **build["env"]}
    done = _run_step(build, tmp_path, 2, {k: str(v) for k, v in env.items()})
    assert done.returncode != 0
    done = _run_step(build, tmp_path, 0, {k: str(v) for k, v in env.items()})
    assert done.returncode == 0, done.stderr
    # The site URL is the one GitHub Pages gives this repository, not a hard-coded one.
    assert "--site-url https://o.github.io/r/" in done.stdout
    assert build["env"]["SITE_URL"] == "${{ steps.pages.outputs.base_url }}"
    assert _step(nightly, "Find the GitHub Pages URL")["uses"].startswith("actions/configure-pages@")
    assert "github.io" not in NIGHTLY.read_text()
