"""benchmarks/data/install_offline.py: raw files laid into .downloads are converted by the real `taskret data download`
path without fetching, from a folder of raw files or from a git mirror at the registry's pinned commit."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request

import pytest

from taskret.data import load_task
from taskret.download import DATASETS

from ..test_download import PUBLISHED
from . import import_script


@pytest.fixture(scope="module")
def install():
    return import_script("benchmarks/data", "install_offline")


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the offline install fetched a file")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_raw_files_are_converted_without_fetching(install, tmp_path, no_network, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    for source in DATASETS["sst2"].sources + DATASETS["trec"].sources:
        (raw / source.filename).write_bytes(PUBLISHED[source.filename])
    assert install.main(["--data-dir", str(tmp_path / "data"), "--raw", str(raw), "--tasks", "sst2,trec"]) == 0
    assert "sst2: " in capsys.readouterr().out
    assert len(load_task("sst2", data_dir=tmp_path / "data").test) == 2
    provenance = json.loads((tmp_path / "data" / "trec" / "SOURCE.json").read_text())
    assert provenance["files"][0]["url"] == DATASETS["trec"].sources[0].url  # recorded as the publisher's file
    assert set(json.loads((tmp_path / "data" / "checksums.json").read_text())) == {
        s.url for s in DATASETS["sst2"].sources + DATASETS["trec"].sources}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_mirror_is_read_at_the_registrys_commit(install, tmp_path, no_network):
    source = DATASETS["geoquery"].sources[0]
    repo, commit, path = install.github_file(source)
    assert (repo, path) == ("jkkummerfeld+text2sql-data", "data/geography.json") and len(commit) == 40
    with pytest.raises(FileNotFoundError, match=r"no --mirror jkkummerfeld\+text2sql-data=GIT_DIR"):
        install.raw_bytes(source, None, {})
    # A mirror lacking the pinned commit is refused naming the path and the commit.
    git_dir = tmp_path / "mirror.git"
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    with pytest.raises(FileNotFoundError, match=f"no data/geography.json at {commit}"):
        install.raw_bytes(source, None, {repo: git_dir})
