"""`neurarch-trace <org/name>` for an id not in the snapshot: fetch_record through the client and the HF cache."""

from __future__ import annotations

import socket

import pytest

from fakehub import FakeHub, FakeModel, fake_sha, safetensors_header
from generator.errors import ModelNotFound, RecordError
from generator.hub.client import DEFAULT_ENDPOINT, HubSettings, fetch_record
from hubkit import hub_environment

CONFIG = b'{\n  "model_type": "llama",\n  "hidden_size": 64,\n  "vocab_size": 128\n}\n'


@pytest.fixture
def sleeps(monkeypatch, tmp_path):
    return hub_environment(monkeypatch, tmp_path)


def _hub(**kw) -> FakeHub:
    model = FakeModel(id="org/tiny-llama", sha=fake_sha("org/tiny-llama"), config=CONFIG, downloads=5,
                      params={"BF16": 1000, "F32": 24}, **kw)
    gated = FakeModel(id="org/gated", sha=fake_sha("org/gated"), config=CONFIG, gated="auto", fault="gated")
    missing = FakeModel(id="org/no-config", sha=fake_sha("org/no-config"), config=CONFIG, fault="missing")
    return FakeHub([model, gated, missing])


def _offline(monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def test_fetch_uses_the_api_counts_and_then_the_cache(sleeps, monkeypatch):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url + "/")  # trailing slash stripped, as the library does
        record = fetch_record("org/tiny-llama")
        assert record.config_json.encode() == CONFIG and record.sha == hub.model("org/tiny-llama").sha
        assert record.checkpoint_params == 1024 and record.checkpoint_params_by_dtype == {"BF16": 1000, "F32": 24}
        assert record.problems == () and record.downloads == 5
        assert hub.count("GET", "/api/models/org/tiny-llama") == 1 and hub.file_downloads() == 1
        hub.reset_log()
        assert fetch_record("org/tiny-llama") == record
        assert hub.file_downloads() == 0  # config.json came from the HF cache


def test_counts_fall_back_to_safetensors_range_reads(sleeps, monkeypatch):
    with _hub(st_in_listing=False) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        record = fetch_record("org/tiny-llama")
    assert record.checkpoint_params_by_dtype == {"BF16": 1000, "F32": 24}
    assert "get_safetensors_metadata" in record.checkpoint_source
    assert hub.count("GET", "model.safetensors", 206) == 1  # one Range read of the header, no weights


def test_offline_uses_the_cache_and_says_so_when_it_is_not_there(sleeps, monkeypatch):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        online = fetch_record("org/tiny-llama")
        hub.reset_log()
        _offline(monkeypatch)
        record = fetch_record("org/tiny-llama")
        assert record.config_json == online.config_json and record.sha == online.sha
        assert record.checkpoint_params is None and "HF_HUB_OFFLINE is set" in record.problems[0]
        with pytest.raises(ModelNotFound) as err:
            fetch_record("org/never-fetched")
        assert hub.log == [] and hub.arrived == []  # offline means no request at all
    assert err.value.reason == "not in the snapshot and not in the Hugging Face cache (HF_HUB_OFFLINE is set)"
    assert "org/never-fetched" in str(err.value)


def test_unreachable_hub_falls_back_to_the_cache(sleeps, monkeypatch):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        online = fetch_record("org/tiny-llama")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")  # nothing listens there
    record = fetch_record("org/tiny-llama")
    assert record.config_json == online.config_json and "could not be reached" in record.problems[0]
    with pytest.raises(ModelNotFound, match="could not be reached .* not in the Hugging Face cache"):
        fetch_record("org/other")


@pytest.mark.parametrize("repo_id, message", [
    ("org/gated", "gated on the Hub"),
    ("org/no-config", "no config.json"),
    ("org/does-not-exist", "not found on the Hub"),
])
def test_hub_faults_raise_model_not_found(sleeps, monkeypatch, repo_id, message):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ModelNotFound, match=message):
            fetch_record(repo_id)


@pytest.mark.parametrize("bad", ["../etc/passwd", "org/..", "org/x/../../y", "org/na me"])
def test_unsafe_ids_are_refused_before_any_request(sleeps, monkeypatch, tmp_path, bad):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(RecordError):
            fetch_record(bad)
        assert hub.arrived == []
    assert not (tmp_path / "hf-home").exists()


def test_settings_read_the_standard_variables_at_call_time(tmp_path):
    home = tmp_path / "home"
    (home).mkdir()
    (home / "token").write_text("hf_from_file\n")
    env = {"HF_HOME": str(home), "HF_ENDPOINT": "http://127.0.0.1:1/", "HF_HUB_OFFLINE": "yes"}
    s = HubSettings.from_env(env)
    assert (s.endpoint, s.token, s.cache_dir, s.offline) == ("http://127.0.0.1:1", "hf_from_file", home / "hub", True)
    s = HubSettings.from_env({"HF_HOME": str(home), "HF_TOKEN": "hf_env", "HF_HUB_CACHE": str(tmp_path / "c"),
                              "HF_HUB_ETAG_TIMEOUT": "3"})
    assert (s.endpoint, s.token, s.cache_dir, s.offline, s.etag_timeout) == (
        DEFAULT_ENDPOINT, "hf_env", tmp_path / "c", False, 3.0)
    assert HubSettings.from_env({"HF_HOME": str(tmp_path / "empty")}).token is False  # never a stray token


def test_fake_hub_speaks_range_and_resolve_headers(sleeps):
    import urllib.request

    with _hub() as hub:
        model = hub.model("org/tiny-llama")
        url = f"{hub.url}/org/tiny-llama/resolve/main/model.safetensors"
        req = urllib.request.Request(url, headers={"Range": "bytes=0-7"})
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 206 and resp.headers["X-Repo-Commit"] == model.sha and resp.headers["ETag"]
            assert resp.read() == safetensors_header(model.params)[:8]
        with urllib.request.urlopen(urllib.request.Request(url.replace("model.safetensors", "config.json"),
                                                           method="HEAD")) as resp:
            assert int(resp.headers["Content-Length"]) == len(CONFIG)


def test_an_oversized_config_is_refused_before_its_body_is_requested(sleeps, monkeypatch):
    """The size comes from the HEAD of the dry run; the GET of config.json is never made (crawl and
    `neurarch-trace org/name` alike), and the refusal names the model, the file and the size."""
    from generator.hub import client as client_mod

    big = b'{"model_type": "llama", "pad": "' + b"x" * 5000 + b'"}'
    monkeypatch.setattr(client_mod, "MAX_CONFIG_BYTES", 4096)
    with FakeHub([FakeModel(id="org/big-config", sha=fake_sha("big"), config=big, downloads=1)]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        client = client_mod.HubClient()
        with pytest.raises(client_mod.HubFault, match=rf"config.json of org/big-config is {len(big):,} bytes, "
                                                     r"larger than 4,096 bytes: refused before downloading it"):
            client.download_config("org/big-config", hub.model("org/big-config").sha)
        with pytest.raises(ModelNotFound, match=r"org/big-config.*config.json of org/big-config is 5,"):
            fetch_record("org/big-config")
        assert hub.count("HEAD", "/resolve/") >= 2 and hub.count("GET", "config.json") == 0
        assert hub.file_downloads() == 0


def test_a_config_under_the_limit_is_downloaded_once(sleeps, monkeypatch):
    with _hub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        from generator.hub.client import HubClient

        text, commit = HubClient().download_config("org/tiny-llama", hub.model("org/tiny-llama").sha)
        assert text.encode() == CONFIG and commit == hub.model("org/tiny-llama").sha
        assert hub.count("GET", "config.json", 200) == 1
