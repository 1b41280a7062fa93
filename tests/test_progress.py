"""The progress reporter: plain lines with rate and ETA when output goes to a file."""

import io

from taskret.progress import progress_bar, progress_lines


def test_lines_report_count_rate_and_eta():
    stream = io.StringIO()
    with progress_lines(10, "scoring", unit="pairs", log_every=0.0, stream=stream) as advance:
        for _ in range(4):
            advance(1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # one per advance (log_every=0); the final one would repeat the last: not printed again
    assert [line.split(" (")[0] for line in lines] == [f"scoring: {i}/10" for i in range(1, 5)]
    assert lines[0].startswith("scoring: 1/10 (10%)")
    assert "pairs/s" in lines[0] and "ETA 0:00:" in lines[0]
    assert lines[-1].startswith("scoring: 4/10 (40%)")


def test_the_last_line_is_printed_once_and_a_count_that_moved_since_gets_one():
    stream = io.StringIO()
    with progress_lines(3, "eval", log_every=0.0, stream=stream) as advance:
        advance(3)
    assert len(stream.getvalue().splitlines()) == 1 and stream.getvalue().startswith("eval: 3/3 (100%)")
    stream = io.StringIO()
    with progress_lines(3, "eval", log_every=3600.0, stream=stream) as advance:
        advance(3)
    assert len(stream.getvalue().splitlines()) == 1  # nothing shown before: the end shows it
    stream = io.StringIO()
    with progress_lines(3, "eval", log_every=0.0, stream=stream) as advance:
        advance(1)
        advance.resume(2)  # counted after the last line: the end shows 3/3
    assert [line.split(" (")[0] for line in stream.getvalue().splitlines()] == ["eval: 1/3", "eval: 3/3"]


def test_lines_are_rate_limited():
    stream = io.StringIO()
    with progress_lines(1000, "eval", log_every=3600.0, stream=stream) as advance:
        for _ in range(1000):
            advance(1)
    assert stream.getvalue().splitlines() == [stream.getvalue().splitlines()[-1]]
    assert "1000/1000 (100%)" in stream.getvalue() and "ETA -" in stream.getvalue()


def test_disabled_bar_is_silent(capsys):
    with progress_bar(5, "quiet", enabled=False) as advance:
        advance(5)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_bar_without_a_terminal_writes_lines_to_stderr(capsys):
    with progress_bar(3, "demo", log_every=0.0) as advance:
        advance(3)
    err = capsys.readouterr().err
    assert "demo: 3/3 (100%)" in err


def test_resumed_work_counts_as_done_but_not_in_the_rate():
    import time

    stream = io.StringIO()
    with progress_lines(1000, "scoring", unit="pairs", log_every=3600.0, stream=stream) as advance:
        advance.resume(900)  # shards finished by an earlier run
        time.sleep(0.05)
        advance(10)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("scoring: 910/1000 (91%)")
    rate = float(line.split(") ")[1].split(" pairs/s")[0])
    assert 0 < rate < 10 / 0.05 * 1.01  # 10 pairs in >= 50 ms, not 910


def test_report_resumed_falls_back_to_a_plain_callback():
    from taskret.progress import report_resumed

    seen = []
    report_resumed(seen.append, 25)
    report_resumed(seen.append, 0)  # nothing resumed: no call
    report_resumed(None, 5)
    assert seen == [25]
    with progress_bar(30, "demo", log_every=0.0) as advance:
        report_resumed(advance, 20)
        advance(10)


def test_bar_resume_on_a_terminal(monkeypatch, capsys):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with progress_bar(30, "tty", log_every=0.0) as advance:
        advance.resume(20)
        advance(10)
    captured = capsys.readouterr()
    assert "30/30" in captured.out + captured.err and "tty: 30/30" not in captured.err  # the rich bar, not lines


def test_stages_are_silent_unless_reporting_is_on(capsys):
    from taskret.progress import reporting, reporting_enabled, stage

    with stage(4, "encoding", unit="texts") as advance:
        advance(4)
    assert capsys.readouterr() == ("", "")
    with reporting():
        assert reporting_enabled()
        with reporting(False):  # a block may turn it off again; the outer setting comes back after it
            with stage(4, "inner") as advance:
                advance(4)
        with stage(4, "encoding", unit="texts", log_every=3600.0) as advance:
            advance(4)
    assert not reporting_enabled()
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("encoding: 4/4 (100%)") and "inner" not in err
    with stage(2, "asked for", enabled=True) as advance:  # a call site may turn on its own stage
        advance(2)
    assert "asked for: 2/2" in capsys.readouterr().err


def test_the_terminal_bar_goes_to_stderr_not_into_stdout(capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with progress_bar(3, "reranking", unit="pairs") as advance:
        advance(3)
    out, err = capsys.readouterr()
    assert out == "" and "reranking" in err


def test_in_chunks_keeps_the_items_order_and_reports_each_chunk():
    import numpy as np

    from taskret.progress import in_chunks

    words = ["a", "abcd", "ab", "abcdef", "abc"]
    seen_chunks, advanced = [], []

    def lengths(chunk):
        seen_chunks.append(list(chunk))
        return np.array([[len(w)] for w in chunk])

    out = in_chunks(words, lengths, 2, advanced.append, size=len)
    assert out[:, 0].tolist() == [1, 4, 2, 6, 3]
    assert seen_chunks == [["abcdef", "abcd"], ["abc", "ab"], ["a"]]  # longest first
    assert advanced == [2, 2, 1]
    assert in_chunks(words, lengths, 10)[:, 0].tolist() == [1, 4, 2, 6, 3]
