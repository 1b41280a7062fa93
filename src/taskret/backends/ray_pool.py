"""A pool of Ray actors that each hold one model, for the two jobs taskret spreads over a Ray cluster: EPR
scoring (:class:`taskret.epr.distributed.RayScoring`, an LM per actor) and encoding a corpus
(:class:`taskret.retrieval.distributed.RayEncoding`, an encoder per actor).

:class:`RayActorPool` connects to the cluster (or starts a private instance), sizes the pool from the cluster's
GPUs or CPUs, starts the actors and checks that they all loaded the same model, replaces an actor that dies and
stops them all on exit; each job's subclass names its actor class and sends it the work. It sits below both jobs
(in the backends layer) so that neither imports the other.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..progress import library_log
from .base import BackendError, BackendNotInstalled

logger = logging.getLogger(__name__)

__all__ = ["RayActorPool", "RayOptions", "connected", "import_ray", "root_cause", "start_local_cluster",
           "worker_died_errors"]


def import_ray():
    try:
        import ray
    except ImportError as err:
        raise BackendNotInstalled("running on Ray needs ray: pip install 'taskret[ray]'") from err
    return ray


@contextmanager
def connected(address: str, log_file: str | os.PathLike | None = None,
              init_options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """This process connected to Ray for the block: ``local`` starts a private instance on loopback (its processes
    stopped by a watcher should this process die first), any other address (``auto``, ``HOST:PORT``,
    ``ray://...``) joins that cluster; an existing connection is used as it is. Ray's messages go to ``log_file``
    (:class:`_RayLog`). Disconnects at the end where it connected."""
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    # configure_logging=False: no handler of Ray's own on the terminal; the workers' output stays in Ray's logs
    options = {"configure_logging": False, "log_to_driver": False, **(init_options or {})}
    ray_log, reaper = _RayLog(log_file), None
    try:
        with ray_log.starting():
            if address == "local":
                # A private instance on loopback (Ray would otherwise use the outward-facing address).
                options = {"_node_ip_address": "127.0.0.1", "include_dashboard": _dashboard_wanted(), **options}
                before = _children()
                ray.init(**options)
                reaper = _start_reaper(_children() - before)
            else:
                ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        ray_log.close()
        raise BackendError(f"cannot connect to the Ray cluster at '{address}' ({err}); start one with `ray start "
                           "--head`, or use --ray local") from err
    try:
        yield
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if reaper is not None:  # Ray is stopped: the watcher stops what may be left, and exits
            reaper.stdin.close()
            try:
                reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                reaper.kill()
        ray_log.close()


@dataclass(frozen=True)
class RayOptions:
    """Where to run on Ray (see :class:`RayActorPool`): ``address`` (``auto``, ``local``, ``HOST:PORT`` or
    ``ray://HOST:PORT``), how many actors, and the GPUs and CPUs each holds."""

    address: str = "auto"
    workers: int | None = None
    gpus_per_worker: float | None = None
    cpus_per_worker: float = 1.0


class RayActorPool:
    """Ray actors of class :attr:`worker`, each built as ``worker(model_spec, model_options, threads)``.

    ``address``: ``auto`` (the cluster this machine belongs to), ``local`` (start a private instance),
    ``HOST:PORT`` or ``ray://HOST:PORT``. ``workers``: how many actors (default: one per GPU of the cluster
    when it has GPUs, else one per ``cpus_per_worker`` CPUs). ``gpus_per_worker`` defaults to 1 when the
    cluster has GPUs, else 0.

    Use as a context manager: entering starts the actors (and fails early if the model does not load),
    leaving stops them and disconnects if this object connected.
    """

    #: The actor class (its ``info()`` returns the loaded model's ``name``, its ``pid`` and ``node``).
    worker: type
    #: What the actors hold, as the errors name it.
    model_kind = "the model"

    def __init__(self, model_spec: str, model_options: Mapping[str, Any] | None = None, address: str = "auto",
                 workers: int | None = None, gpus_per_worker: float | None = None, cpus_per_worker: float = 1.0,
                 max_shard_attempts: int = 3, max_worker_restarts: int | None = None,
                 init_options: Mapping[str, Any] | None = None, startup_timeout: float = 600.0,
                 log_file: str | os.PathLike | None = None):
        if workers is not None and workers < 1:
            raise ValueError("workers must be >= 1")
        if max_shard_attempts < 1:
            raise ValueError("max_shard_attempts must be >= 1")
        self.model_spec = model_spec
        self.model_options = dict(model_options or {})
        self.address = address
        self.workers = workers
        self.gpus_per_worker = gpus_per_worker
        self.cpus_per_worker = cpus_per_worker
        self.max_shard_attempts = max_shard_attempts
        self.max_worker_restarts = max_worker_restarts
        self.init_options = dict(init_options or {})
        self.startup_timeout = startup_timeout
        self.actors: list = []
        self.model_name: str | None = None
        self.stats = {"shards": 0, "retried_shards": 0, "worker_failures": 0, "workers_started": 0}
        self._actor_cls = None
        self.log_file = log_file  # Ray's messages (default: the active run log, else $TMPDIR/taskret/ray-PID.log)
        self._connection = None  # connected(...) while this pool holds the connection

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> "RayActorPool":
        ray = import_ray()
        self._connection = connected(self.address, self.log_file, self.init_options)
        self._connection.__enter__()
        try:
            resources = ray.cluster_resources()
            gpus = float(resources.get("GPU", 0))
            if self.gpus_per_worker is None:
                self.gpus_per_worker = 1.0 if gpus >= 1 else 0.0
            if self.workers is None:
                if self.gpus_per_worker > 0:
                    self.workers = max(1, int(gpus // self.gpus_per_worker))
                else:
                    self.workers = max(1, int(float(resources.get("CPU", 1)) // max(self.cpus_per_worker, 1e-9)))
            if self.max_worker_restarts is None:
                self.max_worker_restarts = 2 * self.workers
            wanted = {"CPU": self.workers * self.cpus_per_worker, "GPU": self.workers * self.gpus_per_worker}
            short = {k: v for k, v in wanted.items() if v > float(resources.get(k, 0))}
            if short:
                logger.warning("%d Ray workers ask for %s but the cluster has %s; they start as resources appear",
                               self.workers, wanted, {k: resources.get(k, 0) for k in wanted})
            self._actor_cls = ray.remote(self.worker)
            self.actors = [self._start_actor() for _ in range(self.workers)]
            try:
                infos = ray.get([a.info.remote() for a in self.actors], timeout=self.startup_timeout)
            except ray.exceptions.GetTimeoutError as err:
                raise BackendError(f"{self.workers} Ray workers ({self.cpus_per_worker:g} CPU, {self.gpus_per_worker:g} "
                                   f"GPU each) did not start within {self.startup_timeout:g} s; the cluster has "
                                   f"{dict(resources)}") from err
            except ray.exceptions.RayError as err:
                raise BackendError(f"the Ray workers could not load {self.model_kind} '{self.model_spec}': "
                                   f"{root_cause(err)}") from err
            names = {i["name"] for i in infos}
            if len(names) != 1:
                raise BackendError(f"the Ray workers loaded different models: {sorted(names)}")
            self.model_name = names.pop()
            self.worker_info = infos
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        ray = import_ray()
        for actor in self.actors:
            try:
                ray.kill(actor)
            except Exception:  # already dead
                pass
        self.actors = []
        if self._connection is not None:
            connection, self._connection = self._connection, None
            connection.__exit__(None, None, None)

    def _start_actor(self):
        threads = None if self.gpus_per_worker else max(1, int(self.cpus_per_worker))
        actor = self._actor_cls.options(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                                        max_restarts=0, max_task_retries=0).remote(
            self.model_spec, self.model_options, threads)
        self.stats["workers_started"] += 1
        return actor

    def _forget(self, actor, idle: list) -> None:
        ray = import_ray()
        if actor in self.actors:
            self.actors.remove(actor)
        if actor in idle:
            idle.remove(actor)
        try:
            ray.kill(actor)
        except Exception:
            pass


def worker_died_errors(ray) -> tuple[type[BaseException], ...]:
    """The errors that mean the worker (not the scoring) failed, by the names this Ray version has."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "ObjectLostError",
             "NodeDiedError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


def root_cause(err: BaseException) -> BaseException:
    cause = getattr(err, "as_instanceof_cause", None)
    if callable(cause):
        try:
            return cause()
        except Exception:
            return err
    return err


# the longest --temp-dir whose Ray socket paths fit a Unix socket's 107 bytes (see start_local_cluster)
MAX_RAY_TEMP_DIR = 40


@contextmanager
def start_local_cluster(num_cpus: int | None = None, num_gpus: int | None = None,
                        temp_dir: str | os.PathLike | None = None, timeout: float = 180.0,
                        worker_nodes: int = 0, worker_cpus: int = 1) -> Iterator[str]:
    """A private Ray head node on 127.0.0.1 (``ray start --head --block`` in a process session of its
    own), and ``worker_nodes`` worker nodes joined to it (``ray start --address=HEAD --block``, each a process
    session of its own, ``worker_cpus`` CPUs each: a multi-node cluster on one machine); yields the head's address
    once every node is up, and on exit stops exactly their processes (``ray stop`` would stop every Ray cluster of
    the user). For tests and benchmarks; the driver needs the same ``RAY_AUTH_MODE`` setting."""
    import_ray()
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_cli is None:
        raise BackendNotInstalled("the `ray` command is not on PATH: pip install 'taskret[ray]'")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    # ENABLE_RAY_CLUSTER off keeps every Ray address on loopback; worker nodes need it on (Ray refuses them
    # otherwise), and --node-ip-address=127.0.0.1 keeps their addresses on loopback then.
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1" if worker_nodes else "0",
           "RAY_USAGE_STATS_ENABLED": "0"}
    command = [ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--include-dashboard=false", "--disable-usage-stats"]
    if num_cpus is not None:
        command.append(f"--num-cpus={num_cpus}")
    if num_gpus is not None:
        command.append(f"--num-gpus={num_gpus}")
    if temp_dir is not None:
        temp_dir = Path(temp_dir).resolve()
        # Ray's sockets live at TEMP/session_<time>_<pid>/sockets/plasma_store.N, ~66 bytes past TEMP, and a Unix
        # socket's path holds at most 107: a longer folder fails only when a worker node starts, so say it now.
        if len(str(temp_dir).encode()) > MAX_RAY_TEMP_DIR:
            raise BackendError(f"Ray's temp dir {temp_dir} is {len(str(temp_dir).encode())} bytes long; Ray's socket "
                               f"paths under it need it at most {MAX_RAY_TEMP_DIR} (tempfile.mkdtemp(dir='/tmp'))")
        command.append(f"--temp-dir={temp_dir}")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workers: list[subprocess.Popen] = []
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise BackendError(f"`ray start` exited with {proc.returncode}: "
                                   f"{log.read().decode(errors='replace')[-2000:]}")
            status = subprocess.run([ray_cli, "status", f"--address={address}"], env=env, capture_output=True,
                                    timeout=60)
            if status.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise BackendError(f"the Ray head at {address} did not come up within {timeout:g} s")
            time.sleep(0.5)
        for joined in range(1, worker_nodes + 1):
            workers.append(_join_worker(ray_cli, address, worker_cpus, env, log, nodes=joined + 1, timeout=timeout))
        yield address
    finally:
        for worker in workers:
            _stop_group(worker)
        _stop_group(proc)
        log.close()


# A worker node's `ray start` gives its raylet 30 s to register (fixed in Ray's node.py): on a loaded machine it
# can miss that and exit, so a worker that exits before it is seen is started again, within the deadline.
WORKER_START_ATTEMPTS = 3


def _join_worker(ray_cli: str, address: str, cpus: int, env: dict, log, nodes: int,
                 timeout: float) -> subprocess.Popen:
    """One worker node (``ray start --address=HEAD --block`` in a process session of its own), returned once
    ``ray status`` lists ``nodes`` live nodes; one node at a time keeps a small machine from stalling them all."""
    deadline = time.monotonic() + timeout
    for attempt in range(1, WORKER_START_ATTEMPTS + 1):
        worker = subprocess.Popen([ray_cli, "start", f"--address={address}", "--block",
                                   "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--disable-usage-stats"],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while worker.poll() is None and time.monotonic() < deadline:
            status = subprocess.run([ray_cli, "status", f"--address={address}"], env=env, capture_output=True,
                                    timeout=60, text=True)
            if status.returncode == 0 and _active_nodes(status.stdout) >= nodes:
                return worker
            time.sleep(0.5)
        _stop_group(worker)
        if time.monotonic() >= deadline or attempt == WORKER_START_ATTEMPTS:
            log.seek(0)
            raise BackendError(f"Ray worker node {nodes - 1} did not join {address} ({attempt} attempts): "
                               f"{log.read().decode(errors='replace')[-2000:]}")
    raise AssertionError("unreachable")


def _active_nodes(status: str) -> int:
    """The live nodes in ``ray status``'s report: its " 1 node_..." lines under "Active:", before "Pending:" (a
    node that failed is listed under "Recent failures:")."""
    active = status.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in status else ""
    return sum(1 for line in active.splitlines() if "node_" in line)


def _dashboard_wanted() -> bool:
    """Ray's dashboard for a local instance: off (a web server and ~100 MB) unless TASKRET_RAY_DASHBOARD=1."""
    return os.environ.get("TASKRET_RAY_DASHBOARD", "") not in ("", "0")


def _children() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children()}


def _start_reaper(pids: set[int]) -> subprocess.Popen | None:
    """The watcher (:mod:`taskret.backends.ray_reaper`) that stops the processes ``pids`` (a local instance's, and
    their descendants) if this process dies without stopping them; in a session of its own, so that the Ctrl-C
    which interrupts this process does not stop it too."""
    if not pids:
        return None
    return subprocess.Popen([sys.executable, "-m", "taskret.backends.ray_reaper", str(os.getpid()), *map(str, sorted(pids))],
                            stdin=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


class _RayLog:
    """Ray's logger (``ray`` and its children) into a file while Ray is connected: ``path``, else the active
    :func:`~taskret.training.logs.library_logs` file (:func:`taskret.progress.library_log`), else ``$TMPDIR/taskret/ray-PID.log``, which is then named
    in a line on stderr."""

    def __init__(self, path: str | os.PathLike | None = None):
        active = library_log()
        self.path = Path(path) if path is not None else active or Path(tempfile.gettempdir()) / "taskret" / \
            f"ray-{os.getpid()}.log"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(self.path, encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.logger = logging.getLogger("ray")
        self.saved = (self.logger.propagate, list(self.logger.handlers))
        if path is None and active is None:  # a line, not a warning: nothing is wrong
            print(f"Ray's messages -> {self.path}", file=sys.stderr, flush=True)

    @contextmanager
    def starting(self):
        """While ``ray.init`` runs: it clears the ``ray`` logger's handlers (configure_logging=False), so what it
        logs meanwhile (its ``ray._private`` modules': the token-authentication notice, "Started a local Ray
        instance") reaches the file through ``ray._private``'s; afterwards the file is the ``ray`` logger's own."""
        inner = logging.getLogger("ray._private")
        saved = inner.propagate, list(inner.handlers)
        inner.propagate, inner.handlers = False, [self.handler]
        try:
            yield
        finally:
            inner.propagate, inner.handlers = saved
            self.logger.propagate = False
            self.logger.handlers = [self.handler]

    def close(self) -> None:
        self.logger.propagate, self.logger.handlers = self.saved
        self.handler.close()


def _session_pids(session: int) -> list[int]:
    """Live processes of a session (Ray puts each worker in a process group of its own, but not out of
    the session), from /proc; zombies excluded."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
        if len(fields) > 3 and fields[0] != "Z" and int(fields[3]) == session:
            pids.append(int(entry.name))
    return pids


def _signal_all(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM every process of the head's session (head, raylet, GCS, workers), SIGKILL what is left after
    a few seconds (a graceful `ray start --block` shutdown takes ~30 s), and reap the head."""
    session = proc.pid
    _signal_all(_session_pids(session) or [proc.pid], signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _session_pids(session):
        time.sleep(0.2)
    _signal_all(_session_pids(session), signal.SIGKILL)
    proc.wait()
