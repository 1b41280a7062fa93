"""The progress reporter: plain lines with rate and ETA when output goes to a file."""

import io

from taskret.progress import progress_bar, progress_lines


def test_lines_report_count_rate_and_eta():
    stream = io.StringIO()
    with progress_lines(10, "scoring", unit="pairs", log_every=0.0, stream=stream) as advance:
        for _ in range(4):
            advance(1)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5  # one per advance (log_every=0) and a final one
    assert lines[0].startswith("scoring: 1/10 (10%)")
    assert "pairs/s" in lines[0] and "ETA 0:00:" in lines[0]
    assert lines[-1].startswith("scoring: 4/10 (40%)")


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
