"""The Docker sandbox: one locked-down container per sandbox, one ``exec`` per run.

Holds :class:`DockerSandbox` and :func:`docker_available`. The container has
no network (``network_mode="none"``), a read-only root filesystem, a tmpfs
work dir, memory and pids limits, all capabilities dropped,
``no-new-privileges``, and runs as ``nobody``. Each run is wrapped in
``ulimit`` (CPU, file size, address space) and ``timeout -s KILL``; after
the run every process of the sandbox user is killed and the work dir wiped.
Needs the ``docker`` package and an engine that answers; the image must be
present locally (no pulls at run time).
"""

from __future__ import annotations

import base64
import json
import os
import time
from typing import Any

from llmgym.sandbox.base import ExecutionResult, Sandbox, SandboxError, SandboxLimits, check_files, describe_failure

__all__ = ["DockerSandbox", "docker_available"]

_BOOTSTRAP = (
    "import base64,json,os,sys\n"
    "job=json.loads(base64.b64decode(sys.argv[1]))\n"
    "for name,text in job['files'].items():\n"
    "    path=os.path.normpath(os.path.join('/work',name))\n"
    "    if not path.startswith('/work/'): raise SystemExit('file name leaves the work dir')\n"
    "    os.makedirs(os.path.dirname(path),exist_ok=True)\n"
    "    open(path,'w').write(text)\n"
    "sys.argv=['<sandbox>']\n"
    "exec(compile(job['code'],'<sandbox>','exec'),{'__name__':'__main__'})\n"
)


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
        image: a local image with ``python`` and coreutils' ``timeout``.
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).

    The container starts on the first :meth:`run`; :meth:`close` removes it.
    """

    def __init__(self, limits: SandboxLimits | None = None, *, image: str = "python:3.11-slim", client: Any = None):
        self.limits = limits or SandboxLimits()
        self.image = image
        self._client = client
        self._container: Any = None
        self._owner_pid = os.getpid()

    def _ensure(self) -> Any:
        if self._container is not None:
            return self._container
        try:
            import docker
        except ImportError as err:
            raise SandboxError("the Docker backend needs the docker package: pip install 'llmgym[docker]'") from err
        if self._client is None:
            try:
                self._client = docker.from_env()
            except docker.errors.DockerException as err:
                host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
                raise SandboxError(f"no Docker engine answers at {host} ({err}); start one, set DOCKER_HOST, "
                                   "or use make_sandbox('subprocess')") from err
        try:  # containers.run would pull a missing image; a sandbox never downloads at run time
            self._client.images.get(self.image)
        except docker.errors.ImageNotFound as err:
            raise SandboxError(f"the image {self.image!r} is not present locally and is never pulled at run time: "
                               f"run `docker pull {self.image}` first") from err
        limits = self.limits
        self._container = self._client.containers.run(
            self.image, ["sleep", "infinity"], detach=True, network_mode="none", read_only=True,
            mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m", pids_limit=limits.max_processes,
            tmpfs={"/work": "size=64m,mode=1777", "/tmp": "size=16m,mode=1777"}, user="65534:65534",
            cap_drop=["ALL"], security_opt=["no-new-privileges"], working_dir="/work", environment={},
            labels={"llmgym": "sandbox"},
        )
        return self._container

    def run(self, code: str, files: dict[str, str] | None = None, limits: SandboxLimits | None = None) -> ExecutionResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        limits = limits or self.limits
        files = check_files(files)
        try:
            container = self._ensure()
        except SandboxError as err:
            return ExecutionResult(error=f"sandbox unavailable: {err}")
        except Exception as err:  # noqa: BLE001  engine gone, image missing: an error result, not a crash
            return ExecutionResult(error=f"sandbox unavailable: {type(err).__name__}: {err}")
        job = base64.b64encode(json.dumps({"code": code, "files": files}).encode()).decode()
        cpu = max(1, int(limits.cpu_time_s + 0.999))
        script = (
            f"ulimit -t {cpu} -f {limits.file_size_mb * 2048} -v {limits.memory_mb * 1024}; "
            f'exec timeout -s KILL {limits.wall_time_s:g} python -I -c "$0" "$1"'
        )
        start = time.monotonic()
        try:
            exit_code, (out, err) = container.exec_run(
                ["sh", "-c", script, _BOOTSTRAP, job], workdir="/work", demux=True, environment={})
        except Exception as exc:  # noqa: BLE001
            return ExecutionResult(error=f"sandbox failure: {type(exc).__name__}: {exc}")
        duration = time.monotonic() - start
        container.exec_run(["sh", "-c", "kill -9 -1; rm -rf /work/* /work/.[!.]* /tmp/*"])
        out, err = out or b"", err or b""
        cap = limits.max_output_bytes
        timed_out = exit_code in (124, 137) and duration >= 0.9 * limits.wall_time_s
        if exit_code is not None and exit_code > 128:  # timeout and sh report "killed by signal N" as 128 + N
            exit_code = -(exit_code - 128)
        result = ExecutionResult(
            stdout=out[:cap].decode("utf-8", "replace"), stderr=err[:cap].decode("utf-8", "replace"),
            exit_code=exit_code, timed_out=timed_out, output_truncated=len(out) > cap or len(err) > cap, duration_s=duration,
        )
        result.error = describe_failure(result, limits)
        return result

    def isolation(self) -> dict[str, Any]:
        return {"backend": "docker", "uid_drop": True, "network_isolated": True, "private_tmp": True,
                "process_limit": True, "can_signal_caller": False, "read_only_root": True}

    def close(self) -> None:
        container, self._container = self._container, None
        if container is not None and os.getpid() == self._owner_pid:  # a forked copy must not remove the parent's
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001  already gone
                pass
