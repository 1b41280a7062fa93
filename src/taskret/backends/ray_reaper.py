"""What stops a local Ray instance whose driver died without stopping it (SIGKILL, the OOM killer).

``ray.init()`` with no cluster starts Ray's processes as children of the driver. When the driver is killed, the
GCS server and the raylet follow it, but the raylet's agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``,
~200 MB together) outlive it for minutes, polling for a raylet that is gone. So
:class:`~taskret.backends.ray_pool.RayActorPool` (EPR scoring, corpus encoding) starts this watcher beside a local instance::

    python -m taskret.backends.ray_reaper DRIVER_PID PID [PID ...]

with the pids of the instance's processes (the GCS server, the raylet, ...). In a session of its own (a Ctrl-C to
the terminal's process group does not stop it first), it records those processes and their descendants every
:data:`POLL_S` seconds while the driver lives; once the driver is gone, or its stdin closes (the driver stopped
Ray itself, and closes it last), it sends SIGTERM to each recorded process still alive, then SIGKILL to what is
left after :data:`GRACE_S` seconds, and exits. A process is known by its pid and start time, so a pid that the
system has since given to another process is left alone. Only the standard library and psutil (a dependency of
Ray) are imported: it starts in a fraction of a second.
"""

from __future__ import annotations

import os
import select
import sys

import psutil

#: Seconds between two looks at the instance's processes (a worker started since is recorded at the next look).
POLL_S = 0.5
#: Seconds between SIGTERM and SIGKILL.
GRACE_S = 3.0


def _record(known: dict[int, float], roots: list[int]) -> None:
    """Add ``roots`` and their descendants, alive now, to ``known`` (pid -> start time)."""
    for pid in roots:
        try:
            process = psutil.Process(pid)
            family = [process, *process.children(recursive=True)]
        except psutil.Error:
            continue
        for member in family:
            try:
                known.setdefault(member.pid, member.create_time())
            except psutil.Error:
                pass


def _lives(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # killed, not yet reaped by its parent
    except psutil.Error:
        return False


def _alive(known: dict[int, float]) -> list[psutil.Process]:
    alive = []
    for pid, started in known.items():
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            pass
    return alive


def stop(known: dict[int, float], grace: float = GRACE_S) -> None:
    """SIGTERM every process of ``known`` still alive, SIGKILL those left after ``grace`` seconds."""
    alive = _alive(known)
    for process in alive:
        try:
            process.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(alive, timeout=grace)
    for process in left:
        try:
            process.kill()
        except psutil.Error:
            pass


def watch(driver: int, roots: list[int], poll: float = POLL_S) -> None:
    """Record ``roots``' family while ``driver`` lives and stdin stays open; then stop it."""
    known: dict[int, float] = {}
    while _lives(driver):
        _record(known, [*roots, *known])
        ready, _, _ = select.select([sys.stdin], [], [], poll)
        if ready and not os.read(sys.stdin.fileno(), 1024):  # closed: the driver is done with Ray
            break
    stop(known)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not all(arg.isdigit() for arg in argv):
        print("usage: python -m taskret.backends.ray_reaper DRIVER_PID PID [PID ...]", file=sys.stderr)
        return 2
    watch(int(argv[0]), [int(arg) for arg in argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
