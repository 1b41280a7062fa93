"""The real `taskret serve` in a subprocess, on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(index, cwd=None, args=(), flag="--index"):
    """`taskret serve --index INDEX [ARGS]` in a subprocess (from ``cwd``), answering /health: yields its URL.
    ``flag="--shards"``: ``index`` is a shards config."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "2000"}
    process = subprocess.Popen([sys.executable, "-m", "taskret.cli", "serve", flag, str(index), "--port",
                                str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"taskret serve exited with {process.returncode}: {process.stdout.read().decode()}")
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("taskret serve did not answer /health within 60 s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def server(bm25_index):
    with running_server(bm25_index) as url:
        yield url


def test_serve_answers_health_and_retrieve(server):
    assert httpx.get(f"{server}/health").json()["status"] == "ok"
    body = httpx.post(f"{server}/retrieve", json={"query": "play some jazz", "k": 2}).json()
    assert body["ids"][0] == "music" and len(body["texts"]) == 2
    bad = httpx.post(f"{server}/retrieve", json={"query": "a", "k": 0})
    assert bad.status_code == 422
    assert httpx.get(f"{server}/health").status_code == 200  # still serving after a bad request


def test_serve_refuses_a_partial_index(bm25_index):
    (bm25_index / "meta.json").unlink()
    result = subprocess.run([sys.executable, "-m", "taskret.cli", "serve", "--index", str(bm25_index)],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "2000"})
    assert result.returncode == 2 and "meta.json: missing" in result.stderr


def test_stopping_a_server_of_two_workers_leaves_no_semaphore_behind(bm25_index):
    import signal

    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "taskret.cli", "serve", "--index", str(bm25_index), "--port",
                                str(port), "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "2000"})
    try:
        deadline = time.monotonic() + 90
        answered = 0
        while answered < 4 and time.monotonic() < deadline:  # queries reach both workers (each tokenizes with bm25s)
            try:
                answered += httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"query": "play jazz"},
                                       timeout=2).status_code == 200
            except httpx.TransportError:
                time.sleep(0.3)
        assert answered == 4
    finally:
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=30)[0].decode()
    assert "leaked semaphore" not in output, output
