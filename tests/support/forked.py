"""Python processes forked from a warm parent instead of started afresh.

Many tests run code in a process of its own: another process's view of a cache or a compiled program, a crash
that must not take the run down, an example script end to end. A fresh interpreter spends about a second importing
NumPy, JAX, Warp and Equinox before that code starts; the suite starts about a hundred. `run` and `start` fork
such processes from a server that imported those once (one server per environment, since JAX reads its settings
from the environment when it is imported), with `subprocess.run` / `subprocess.Popen`-like results.

What the child runs finds a fresh process in every respect the suite checks: jarp is not imported yet (its import,
its handler build and its exit guard happen in the child), no JAX backend exists yet and Warp is not initialised;
``sys.argv``, ``sys.path`` (``PYTHONPATH`` included), the working directory, the environment and the standard
streams are the command's; the interpreter exits as a fresh one does (threads joined, ``atexit`` hooks, module
teardown), with the exit code, or the signal, of the code it ran.

One difference remains: the children of one server share its string hash seed, where fresh interpreters each draw
their own. A test about independence from the hash seed sets ``PYTHONHASHSEED=random``, and `start` then starts a
fresh interpreter. Not for code that must see its own interpreter start either (a ``sitecustomize``, an import hook
installed before NumPy or JAX are imported, ``-X`` options): start those with `subprocess`. ``JARP_TESTS_FORK=0`` starts every process
afresh instead (the same results, slower), to rule the server out when a child behaves oddly.

Example:
    ```python
    proc = run([sys.executable, "-c", "import jarp.warp; print('ok')"], env=os.environ, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok"
    ```
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What the server imports before it forks: the suite's children all import these, and none reads the environment
#: after its import in a way a fork would freeze (JAX's settings are read at import: one server per environment).
PRELOAD = ("numpy", "jax", "jax.numpy", "warp", "equinox", "jaxtyping")
#: Variables the child applies itself: read by the interpreter at start-up, not by the preloaded modules, or (pytest's
#: name of the running test) different in every test. The server is chosen by the rest of the environment.
_APPLIED_IN_CHILD = ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTEST_CURRENT_TEST")
#: jarp's own variables: jarp is not preloaded, so it reads them in the child (children that differ only in these
#: share a server instead of each starting one).
_APPLIED_IN_CHILD_PREFIX = "JARP_"
ENV = "JARP_TESTS_FORK"

_servers: dict[frozenset[tuple[str, str]], _Server] = {}
_servers_lock = threading.Lock()


def enabled() -> bool:
    """Whether children are forked from a server (``JARP_TESTS_FORK`` unset or not ``0``) on this platform."""
    return os.environ.get(ENV, "1") != "0" and hasattr(os, "fork") and sys.platform.startswith("linux")


# ======================================================================================================================
# The client side
# ======================================================================================================================


class Forked:
    """A child forked by a server: `subprocess.Popen`'s ``pid``, ``returncode``, `poll`, `wait`, `kill`, `communicate`.

    Its standard output and error go to files, read by `communicate` (as text).
    """

    def __init__(self, args: Sequence[str], server: _Server, request: dict[str, Any], tmp: Path) -> None:
        self.args = list(args)
        self._tmp = tmp
        self._conn = server.connect()
        _send(self._conn, request)
        kind, self.pid = _receive(self._conn)
        assert kind == "pid", kind
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (negative: the signal), or None while the child runs."""
        if self.returncode is None:
            self._conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                self._finish(_receive(self._conn))
            self._conn.setblocking(True)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child; `subprocess.TimeoutExpired` after ``timeout`` seconds (the child keeps running)."""
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                message = _receive(self._conn)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0) from None
            finally:
                self._conn.settimeout(None)
            self._finish(message)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        """Send SIGKILL to the child (if it still runs)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the child, then its standard output and error as text."""
        self.wait(timeout)
        out = (self._tmp / "stdout").read_text(errors="replace")
        err = (self._tmp / "stderr").read_text(errors="replace")
        shutil.rmtree(self._tmp, ignore_errors=True)
        return out, err

    def _finish(self, message: tuple[str, int]) -> None:
        kind, status = message
        assert kind == "exit", kind
        self.returncode = os.waitstatus_to_exitcode(status)
        self._conn.close()


def start(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | None = None,
) -> Forked | subprocess.Popen[str]:
    """Start ``args`` (``[sys.executable, ...]``: a script, ``-c`` code or ``-m`` module) forked from a warm server.

    Args:
        args: the command; its first item must be this interpreter.
        env: the child's environment (default: this process's).
        cwd: the child's working directory (default: this process's).
        input: text for the child's standard input (default: empty).

    Returns:
        A `Forked` child, or a `subprocess.Popen` (pipes, text) where forking is off or the command has options
        the server does not apply.
    """
    env = dict(os.environ if env is None else env)
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
    plan = _parse(args)
    tmp = Path(tempfile.mkdtemp(prefix="jarp-forked-"))
    (tmp / "stdin").write_text(input or "")
    if plan is None or not enabled() or env.get("PYTHONHASHSEED") == "random":
        with open(tmp / "stdin") as stdin:
            proc = subprocess.Popen(
                list(args), env=env, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        shutil.rmtree(tmp, ignore_errors=True)
        return proc
    server = _server(env)
    request = {"plan": plan, "env": env, "cwd": cwd, "streams": str(tmp)}
    return Forked(args, server, request, tmp)


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(args, capture_output=True, text=True)`, forked from a warm server (see `start`).

    Raises:
        subprocess.TimeoutExpired: after ``timeout`` seconds; the child is killed first.
    """
    proc = start(args, env=env, cwd=cwd, input=input)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(list(args), proc.returncode, out, err)


def _parse(args: Sequence[str]) -> tuple[str, str, list[str], bool] | None:
    """``(kind, what, argv, unbuffered)`` for ``python [-u] (-c code | -m module | script) args...``, else None."""
    if not args or os.path.realpath(args[0]) != os.path.realpath(sys.executable):
        return None
    rest = list(args[1:])
    unbuffered = False
    while rest and rest[0] == "-u":
        unbuffered = True
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-c":
        return ("code", rest[1], ["-c", *rest[2:]], unbuffered)
    if len(rest) >= 2 and rest[0] == "-m":
        return ("module", rest[1], [rest[1], *rest[2:]], unbuffered)
    if rest and not rest[0].startswith("-"):
        return ("script", rest[0], rest, unbuffered)
    return None


def _server(env: Mapping[str, str]) -> _Server:
    # the server's environment names it
    own = {k: v for k, v in env.items() if k not in _APPLIED_IN_CHILD and not k.startswith(_APPLIED_IN_CHILD_PREFIX)}
    key = frozenset(own.items())
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = _servers[key] = _Server(own)
        return server


class _Server:
    """A server process (this file run as a script) listening on a Unix socket in a temporary directory."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="jarp-fork-server-")
        self.path = os.path.join(self._dir, "socket")
        self._proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", self.path],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal goes to the test run, which stops the server
        )
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(self._dir, "ready")):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit {self._proc.poll()})")
            time.sleep(0.01)
        atexit.register(self.stop)

    def alive(self) -> bool:
        return self._proc.poll() is None

    def connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        return conn

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(10)
        shutil.rmtree(self._dir, ignore_errors=True)


def _send(conn: socket.socket, message: Any) -> None:
    data = pickle.dumps(message)
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> Any:
    (size,) = struct.unpack("!I", _exactly(conn, 4))
    return pickle.loads(_exactly(conn, size))


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the fork server closed the connection")
        data += chunk
    return data


# ======================================================================================================================
# The server side (this file run as a script)
# ======================================================================================================================


def _serve(path: str) -> dict[str, Any]:
    """Accept requests and fork one child each; returns only in a child, with its request."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import gc

    gc.freeze()  # the preloaded objects out of the collector's sight: a child's collections do not copy their pages
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the wakeup fd
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    Path(path).with_name("ready").touch()
    parent = os.getppid()
    while True:
        if os.getppid() != parent:  # the test process is gone: so is the server (its running children finish)
            sys.exit(0)
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                request = _receive(conn)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:  # the child: drop the server's state, become the program
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    listener.close()
                    conn.close()
                    for other in waiting.values():
                        other.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    return request
                _send(conn, ("pid", pid))
                waiting[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, ("exit", status))
                conn.close()


def _become(request: dict[str, Any]) -> None:
    """Turn the forked child into the requested program and run it (as ``python`` would)."""
    import io
    import runpy
    import types

    kind, what, argv, unbuffered = request["plan"]
    env: dict[str, str] = request["env"]
    streams = Path(request["streams"])
    write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", write), (2, "stderr", write)):
        opened = os.open(streams / name, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    unbuffered = unbuffered or bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding="utf-8",
            errors="backslashreplace" if fd == 2 else "strict",
            line_buffering=fd == 2,
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    first = {"code": "", "module": os.getcwd(), "script": os.path.dirname(os.path.abspath(what))}[kind]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *sys.path[1:]]
    sys.argv[:] = argv
    if kind == "code":
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(what, "<string>", "exec"), main.__dict__)
    elif kind == "module":
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    else:
        sys.argv[0] = what
        runpy.run_path(what, run_name="__main__")


if __name__ == "__main__":
    assert sys.argv[1] == "--serve", sys.argv
    sys.path[0] = ""  # this file's directory is not on a fresh interpreter's path
    _become(_serve(sys.argv[2]))
