"""The Docker sandbox: one locked-down container per sandbox, one ``exec`` per run.

Holds :class:`DockerSandbox` and :func:`docker_available`. The container has
no network (``network_mode="none"``), a read-only root filesystem, a tmpfs
work dir, memory and pids limits, all capabilities dropped,
``no-new-privileges``; programs run as ``nobody`` and its first process, a
reaper under another uid, only collects the dead. Each run is wrapped in
``ulimit`` (CPU, file size, address space) and ``timeout -s KILL``; the
program and its files go in through the exec's stdin (no argument-size
limit), its output is read as it comes and no further than the cap; after
the run every process of the sandbox user is killed and the work dir wiped,
and a container that cannot be made ready that way is replaced.
Runs on one sandbox take turns (they share the container). Needs the
``docker`` package and an engine that answers; the image must be present
locally (no pulls at run time).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from llmgym.sandbox.base import ExecutionResult, Sandbox, SandboxError, SandboxLimits, check_files, describe_failure

__all__ = ["DockerSandbox", "docker_available", "DEFAULT_IMAGE"]

DEFAULT_IMAGE = "python:3.11-slim"

# Reads the job (a length line, then that many bytes of JSON) from stdin, writes the files and the program,
# then becomes ``python -I /tmp/main.py``: the program runs as a real __main__, with python's own teardown.
_BOOTSTRAP = (
    "import json,os,sys\n"
    "size=int(sys.stdin.buffer.readline())\n"
    "job=json.loads(sys.stdin.buffer.read(size))\n"
    "for name,text in job['files'].items():\n"
    "    path=os.path.normpath(os.path.join('/work',name))\n"
    "    if not path.startswith('/work/'): raise SystemExit('file name leaves the work dir')\n"
    "    os.makedirs(os.path.dirname(path),exist_ok=True)\n"
    "    open(path,'w',encoding='utf-8',errors='surrogatepass').write(text)\n"
    "open('/tmp/main.py','w',encoding='utf-8',errors='surrogatepass').write(job['code'])\n"
    "os.dup2(os.open(os.devnull,os.O_RDONLY),0)\n"
    "os.execv(sys.executable,[sys.executable,'-I','/tmp/main.py'])\n"
)
# Programs run as nobody. The container's first process (PID 1, under another uid) only reaps: ``kill -9 -1``
# spares PID 1, so the cleanup's kill loop ends once every process of the run is gone and reaped.
_SANDBOX_USER = "65534:65534"
_KEEPER_USER = "65533:65533"
_REAPER = (
    "import os,signal\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK,{signal.SIGCHLD})\n"
    "while True:\n"
    "    try:\n"
    "        while os.waitpid(-1,os.WNOHANG)[0]: pass\n"
    "    except ChildProcessError: pass\n"
    "    signal.sigwaitinfo({signal.SIGCHLD})\n"
)
# Kills until nothing of nobody's is left (a fork bomb forks while it dies), then empties /work and /tmp.
# Exits 0 only when the container is ready for the next run.
_CLEANUP = [
    "sh",
    "-c",
    "n=0; while kill -9 -1 2>/dev/null; do n=$((n+1)); [ $n -lt 100000 ] || exit 1; done; "
    "rm -rf /work/* /work/.[!.]* /work/..?* /tmp/* /tmp/.[!.]* /tmp/..?*",
]
# Runs {command} with $py the image's interpreter: python3, else python (``command -v`` is a builtin: no fork).
_FIND_PYTHON = (
    'for py in python3 python; do command -v "$py" >/dev/null && exec {command}; done; '
    'echo "sandbox setup failed: the image has neither python3 nor python" >&2; exit 120'
)
_CLEANUP_TRIES_S = 3.0  # a cleanup that cannot start (every pid taken) is retried this long, then the container goes
_GRACE_S = 5.0  # beyond the wall clock, for the exec's own start and end
_FRAME_HEADER = 8  # an attached exec's output: [stream, 0, 0, 0, size (4 bytes, big-endian)] then the bytes


def docker_available(timeout: float = 2.0) -> bool:
    """True when the ``docker`` package is installed and an engine answers a ping."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout)
        return bool(client.ping())
    except Exception:  # noqa: BLE001  no engine, no socket, no permission: all mean "not available"
        return False


class DockerSandbox(Sandbox):
    """Run untrusted Python in a locked-down Docker container.

    Args:
        limits: default limits of a run.
        image: a local image with ``python3`` (or ``python``), ``sh`` and coreutils' ``timeout`` (default:
            ``$LLMGYM_SANDBOX_IMAGE``, else ``python:3.11-slim``). ``scripts/sandbox-image.sh`` builds one
            from Debian's packages with no registry.
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).

    The container starts on the first :meth:`run`; :meth:`close` removes it.
    Concurrent runs take turns: they share the container, and each run's
    cleanup kills every process in it. A process forked from the owner starts
    a container of its own and never touches the owner's.
    """

    def __init__(self, limits: SandboxLimits | None = None, *, image: str | None = None, client: Any = None):
        self.limits = limits or SandboxLimits()
        self.image = image or os.environ.get("LLMGYM_SANDBOX_IMAGE") or DEFAULT_IMAGE
        self._client = client
        self._own_client = client is None
        self._container: Any = None
        self._owner_pid = os.getpid()
        self._start_lock = threading.Lock()
        self._run_lock = threading.Lock()

    def _leave_parent_container(self) -> None:
        """In a process forked from the owner: a container (and a connection) of its own, new locks."""
        if os.getpid() == self._owner_pid:
            return
        self._container = None
        if self._own_client:  # its connection pool's sockets are the parent's
            self._client = None
        self._start_lock, self._run_lock = threading.Lock(), threading.Lock()
        self._owner_pid = os.getpid()

    def _ensure(self) -> Any:
        with self._start_lock:  # two first runs at once must not start two containers
            if self._container is None:
                self._container = self._start_container()
            return self._container

    def _start_container(self) -> Any:
        try:
            import docker
        except ImportError as err:
            raise SandboxError("the Docker backend needs the docker package: pip install 'llmgym[docker]'") from err
        if self._client is None:
            try:
                self._client = docker.from_env()
            except docker.errors.DockerException as err:
                host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
                raise SandboxError(
                    f"no Docker engine answers at {host} ({err}); start one, set DOCKER_HOST, "
                    "or use make_sandbox('subprocess')"
                ) from err
        try:  # containers.run would pull a missing image; a sandbox never downloads at run time
            self._client.images.get(self.image)
        except docker.errors.ImageNotFound as err:
            raise SandboxError(
                f"the image {self.image!r} is not present locally and is never pulled at run time: "
                f"run `docker pull {self.image}` first, or build one with no registry "
                "(`bash scripts/sandbox-image.sh`) and pass image= or set LLMGYM_SANDBOX_IMAGE"
            ) from err
        limits = self.limits
        return self._client.containers.run(
            self.image,
            ["sh", "-c", _FIND_PYTHON.format(command='"$py" -I -c "$1"'), "sandbox", _REAPER],
            detach=True,
            network_mode="none",
            read_only=True,
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            pids_limit=limits.max_processes,
            tmpfs={"/work": f"size={_work_dir_mb(limits)}m,mode=700,uid=65534,gid=65534", "/tmp": "size=16m,mode=1777"},
            user=_KEEPER_USER,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            working_dir="/work",
            environment={},
            labels={"llmgym": "sandbox"},
        )

    def run(
        self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None
    ) -> ExecutionResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        limits = limits or self.limits
        files = check_files(files)
        self._leave_parent_container()
        try:
            container = self._ensure()
        except SandboxError as err:
            return ExecutionResult(error=f"sandbox unavailable: {err}")
        except Exception as err:  # noqa: BLE001  engine gone, image missing: an error result, not a crash
            return ExecutionResult(error=f"sandbox unavailable: {type(err).__name__}: {err}")
        job = json.dumps({"code": code, "files": files}).encode()
        with self._run_lock:  # one program at a time: a run's cleanup kills everything in the container
            try:
                return self._run_in(container, job, limits)
            except Exception as exc:  # noqa: BLE001
                return ExecutionResult(error=f"sandbox failure: {type(exc).__name__}: {exc}")
            finally:
                if not _clean(container):
                    self._discard(container)

    def _discard(self, container: Any) -> None:
        """Remove ``container`` (closing, or one the cleanup could not make ready); the next run starts a fresh one."""
        with self._start_lock:
            if self._container is container:
                self._container = None
        try:
            container.remove(force=True)
        except Exception:  # noqa: BLE001  already gone
            pass

    def _run_in(self, container: Any, job: bytes, limits: SandboxLimits) -> ExecutionResult:
        exec_id = self._client.api.exec_create(
            container.id,
            ["sh", "-c", _run_script(limits), "sandbox", _BOOTSTRAP],
            stdin=True,
            workdir="/work",
            environment={},
            user=_SANDBOX_USER,
        )["Id"]
        api = self._client.api
        start = time.monotonic()
        attached = api.exec_start(exec_id, socket=True)
        sock = getattr(attached, "_sock", attached)  # docker-py hands back a SocketIO over a unix socket
        cap = limits.max_output_bytes
        deadline = start + limits.wall_time_s + _GRACE_S
        try:
            sock.settimeout(min(limits.wall_time_s + _GRACE_S, 3600.0))
            try:
                sock.sendall(b"%d\n" % len(job) + job)
            except OSError:  # the bootstrap stopped reading (a bad file name): its error is in the output
                pass
            out, err, overflow, waited_out = _read_output(sock, cap, deadline)
        finally:
            for stream in (attached, sock):
                try:
                    stream.close()
                except OSError:
                    pass
        duration = time.monotonic() - start
        if overflow or waited_out:  # the program may still run: stop it before asking for its status
            _clean(container)
        exit_code = _exit_code(api, exec_id)
        timed_out = waited_out or (exit_code in (124, 137) and duration >= 0.9 * limits.wall_time_s)
        if exit_code is not None and exit_code > 128:  # timeout and sh report "killed by signal N" as 128 + N
            exit_code = -(exit_code - 128)
        result = ExecutionResult(
            stdout=bytes(out[:cap]).decode("utf-8", "replace"),
            stderr=bytes(err[:cap]).decode("utf-8", "replace"),
            exit_code=exit_code,
            timed_out=timed_out and not overflow,
            output_truncated=overflow,
            duration_s=duration,
        )
        result.error = describe_failure(result, limits)
        if exit_code is None and not result.error:
            result.error = "sandbox failure: the engine did not report how the program ended"
        return result

    def isolation(self) -> dict[str, Any]:
        return {
            "backend": "docker",
            "uid_drop": True,
            "network_isolated": True,
            "private_tmp": True,
            "process_limit": True,
            "can_signal_caller": False,
            "read_only_root": True,
            "processes_hidden": True,
        }

    def close(self) -> None:
        self._leave_parent_container()  # a forked copy must not remove the parent's container
        container = self._container
        if container is not None:
            self._discard(container)


def _work_dir_mb(limits: SandboxLimits) -> int:
    """The work dir's size: room for a few files at the file-size limit, never under 64 MB."""
    return max(64, 4 * int(limits.file_size_mb))


def _clean(container: Any) -> bool:
    """Kill every process of the run and wipe its files; False when that could not be done in time."""
    deadline = time.monotonic() + _CLEANUP_TRIES_S
    while True:
        try:
            exit_code, _ = container.exec_run(_CLEANUP, user=_SANDBOX_USER)
            if exit_code == 0:
                return True
        except Exception:  # noqa: BLE001  no pid left to start the cleanup, or the container is gone
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _run_script(limits: SandboxLimits) -> str:
    """The shell line of one run: its limits, then the bootstrap (``$1``) under ``timeout``.

    Written for any POSIX ``sh``: dash (Debian's ``/bin/sh``) takes one limit per ``ulimit`` call. ``$0`` is
    the name the shell gives its own messages. ``command -v`` is a builtin, so an image with only ``python3``
    (or only ``python``) works, and finding the interpreter forks nothing.
    """
    cpu = max(1, int(limits.cpu_time_s + 0.999))
    blocks = int(limits.file_size_mb) * 2048  # sh counts file sizes in 512-byte blocks
    return (
        f"{{ ulimit -St {_ulimit(cpu)} && ulimit -Ht {_ulimit(cpu + 1)} && ulimit -f {_ulimit(blocks)} && "
        f"ulimit -v {_ulimit(int(limits.memory_mb) * 1024)}; }} 2>/dev/null || "
        '{ echo "sandbox setup failed: the shell refused the run\'s limits" >&2; exit 120; }; '
        + _FIND_PYTHON.format(command=f'timeout -s KILL {min(limits.wall_time_s, 1e7):g} "$py" -I -c "$1"')
    )


def _ulimit(value: int) -> str:
    """A ``ulimit`` argument; a finite but huge limit means none (more overflows the shell or the kernel)."""
    return str(value) if value < 1 << 32 else "unlimited"


def _read_output(sock: Any, cap: int, deadline: float) -> tuple[bytearray, bytearray, bool, bool]:
    """Demultiplex an attached exec's stdout and stderr until it ends, a stream passes ``cap``, or ``deadline``.

    Returns ``(stdout, stderr, over the cap, deadline passed)``; nothing past the cap is read.
    """
    streams = {1: bytearray(), 2: bytearray()}
    pending = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return streams[1], streams[2], False, True
        sock.settimeout(min(remaining, 3600.0))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return streams[1], streams[2], False, True
        if not chunk:
            return streams[1], streams[2], False, False
        pending += chunk
        while len(pending) >= _FRAME_HEADER:
            size = int.from_bytes(pending[4:_FRAME_HEADER], "big")
            if len(pending) < _FRAME_HEADER + size:
                break
            stream = streams.get(pending[0])
            if stream is not None:
                stream += pending[_FRAME_HEADER : _FRAME_HEADER + size]
                if len(stream) > cap:
                    return streams[1], streams[2], True, False
            del pending[: _FRAME_HEADER + size]


def _exit_code(api: Any, exec_id: str) -> int | None:
    """The exec's exit status; its end can reach the engine's books a moment after its output closes."""
    for _ in range(200):
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            return info.get("ExitCode")
        time.sleep(0.01)
    return None
