"""Run one submission's cells in a child process with limits (what :mod:`.grading` uses).

The parent (:func:`run_cells`) starts ``python -m npu_lab.course.sandbox`` in a scratch folder of
its own (working directory, ``HOME`` and ``TMPDIR`` there), in a new session (so the whole process
group can be killed), under an address-space limit (``RLIMIT_AS``) and a wall-clock deadline,
with ``PYTHONPATH`` pointing at a private copy of the npu_lab package (no path to the course
folder, the gradebook, the instructor notebooks or other submissions is handed over). When the
grader runs as root it also switches the child to an unprivileged user (``nobody`` by default),
so file permissions keep it out of root's folders.

Protocol: the parent sends one cell at a time on the child's stdin (one JSON line: cell index,
source, a fresh random nonce) and waits for the reply on a separate pipe; only then does it send
the next cell. So a cell's source — hidden tests included — exists in the child only once every
cell before it has finished, and a reply must carry the nonce of the cell it answers: a student
cell cannot write the verdict of a later cell in advance. Student output goes to captured
``sys.stdout`` / ``sys.stderr`` (returned in the reply), never to the protocol pipe.

Cells run with plain ``exec`` in a fresh ``__main__`` module (no IPython: the course's cells use
no magics), their lines registered with ``linecache`` so tracebacks and ``inspect.getsource``
work as in a notebook.

What this does *not* stop: code that deliberately attacks the interpreter it runs in (patching
this module, ``builtins``, numpy or ``sys.settrace`` so that a later cell misbehaves, or a thread
reading stdin to answer for a later cell) can forge its own notebook's results — it cannot reach other submissions or the gradebook, and the
instructor reviews grades in formgrader (docs/instructors.md).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

#: Largest stdout/stderr text kept per cell (characters); the rest is cut with a note.
MAX_OUTPUT_CHARS = 20_000
#: The user a root grader switches the child to.
DEFAULT_USER = "nobody"


@dataclass
class CellRun:
    """What one cell did: ``status`` ``"ok"`` or ``"error"`` (``ename`` / ``evalue`` /
    ``traceback`` lines then), its captured ``stdout`` / ``stderr`` and seconds."""

    index: int
    status: str
    stdout: str = ""
    stderr: str = ""
    ename: str = ""
    evalue: str = ""
    traceback: list = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class SandboxRun:
    """The replies of the cells that ran, in order, and ``failure``: None when every cell ran,
    else why the child stopped (timeout, memory, crash), naming the cell it was running."""

    cells: list[CellRun]
    failure: str | None
    seconds: float
    user: str | None = None


_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REC, _MS_PRIVATE = 0x4000, 1 << 18


def _hide(paths) -> None:
    """In the child (root only): a mount namespace of its own, with an empty read-only tmpfs
    over each of ``paths`` and over /proc (through /proc a process could reach its parent's
    folders). Raises OSError when the kernel refuses (no CAP_SYS_ADMIN)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(result, what):
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    for path in [*paths, "/proc"]:
        check(libc.mount(b"none", os.fsencode(path), b"tmpfs", flags, b"size=4k,mode=555"), f"mount tmpfs on {path}")


_PR_CAPBSET_DROP = 24


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def _drop_capabilities(last: int) -> None:
    """Empty the capability bounding set: after exec the child, even as root, has no
    capabilities (it cannot unmount what :func:`_hide` mounted, nor override file modes)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def _limit(memory_bytes: int | None, uid: int | None, gid: int | None, hidden=()):
    root = os.geteuid() == 0
    last = _last_capability() if root else 0

    def preexec():            # in the child, between fork and exec
        import resource

        if hidden:
            _hide(hidden)
        if root:
            _drop_capabilities(last)
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
    return preexec


def can_hide() -> bool:
    """True when this process may give a child a mount namespace of its own (root with
    CAP_SYS_ADMIN, as in most CI containers run as root; not in every container)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    try:
        proc = subprocess.run([child_python(), "-c", "pass"], preexec_fn=lambda: _hide([]), timeout=60,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def can_run_as(user) -> bool:
    """True when ``user`` (``(uid, gid, name)``) can start this Python (its files readable by it)."""
    try:
        proc = subprocess.run([child_python(), "-c", "import numpy"], preexec_fn=_limit(None, user[0], user[1]),
                              cwd="/", timeout=120, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def resolve_user(user: str | None) -> tuple[int, int, str] | None:
    """``(uid, gid, name)`` the child runs as: ``user`` ("auto": :data:`DEFAULT_USER` when the
    grader is root, else nobody else; "none": the grader's own user). Raises ValueError for an
    unknown user or a switch a non-root grader cannot make."""
    import pwd

    if user in (None, "none", ""):
        return None
    if user == "auto":
        if os.geteuid() != 0:
            return None
        user = DEFAULT_USER
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ValueError(f"no user {user!r} to run submissions as (--sandbox-user; 'none' runs them as "
                         "yourself)") from None
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        raise ValueError(f"only root can run submissions as user {user!r}; use --sandbox-user none")
    return entry.pw_uid, entry.pw_gid, user


def library_copy(dest: Path) -> Path:
    """Copy the npu_lab package into ``dest/npu_lab``, and the course data beside it
    (``data/``, which npu_lab.data and npu_lab.presets read), read-only, without ``__pycache__``;
    return ``dest``, the ``PYTHONPATH`` of the child: its ``npu_lab.__file__`` names no
    checkout, so no course or instructor folder is found from it."""
    import npu_lab

    source = Path(npu_lab.__file__).resolve().parent
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source, dest / "npu_lab", ignore=skip)
    if (source.parent / "data").is_dir():
        shutil.copytree(source.parent / "data", dest / "data", ignore=skip)
    for root, dirs, files in os.walk(dest):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
    return dest


def child_python() -> str:
    """This Python, by a path with its symlinked folders resolved (a venv reached through a
    private folder's symlink is still usable by the unprivileged user), the venv kept: the
    executable's own name stays, so ``pyvenv.cfg`` beside it is found."""
    folder = os.path.realpath(os.path.dirname(sys.executable))
    return os.path.join(folder, os.path.basename(sys.executable))


def run_cells(cells, scratch: Path, libdir: Path, *, timeout_s: float, memory_bytes: int | None,
              user=None, hidden=()) -> SandboxRun:
    """Run ``cells`` (``[(index, source), ...]``) in a child process in ``scratch`` (see the
    module doc). ``user``: ``(uid, gid, name)`` from :func:`resolve_user`, or None. ``hidden``:
    folders the child sees empty (root only, :func:`can_hide`). Never raises for what the cells
    do; returns what ran and why it stopped early, if it did."""
    scratch = Path(scratch)
    (scratch / "tmp").mkdir(exist_ok=True)
    uid = gid = None
    if user is not None:
        uid, gid, _name = user
        for root, dirs, files in os.walk(scratch):
            os.chown(root, uid, gid)
            for name in files:
                os.chown(os.path.join(root, name), uid, gid)
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "HOME": str(scratch), "TMPDIR": str(scratch / "tmp"), "PYTHONPATH": str(libdir),
           "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "LANG": "C.UTF-8",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "NPU_LAB_GRADE_RUN": secrets.token_hex(8)}
    python = child_python()
    reply_r, reply_w = os.pipe()
    log = open(scratch / "sandbox.log", "wb")
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        proc = subprocess.Popen(
            [python, "-m", "npu_lab.course.sandbox", str(reply_w)], cwd=scratch, env=env,
            stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(reply_w,), start_new_session=True,
            preexec_fn=_limit(memory_bytes, uid, gid, tuple(hidden)))
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(reply_r)
        os.close(reply_w)
        log.close()
        hint = (f" (user {user[2]} must be able to run {python}: make it readable, or grade with "
                "--sandbox-user none)" if user is not None else "")
        return SandboxRun([], f"the grading process could not start: {exc}{hint}", 0.0)
    os.close(reply_w)
    replies = os.fdopen(reply_r, "rb")
    done: list[CellRun] = []
    failure = None
    try:
        for index, source in cells:
            nonce = secrets.token_hex(16)
            try:
                proc.stdin.write(json.dumps({"index": index, "source": source, "nonce": nonce}).encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                failure = _died(proc, index, deadline, memory_bytes)
                break
            reply = _read_reply(replies, deadline)
            if reply is None:
                failure = (f"stopped at cell {index}: the submission ran longer than the {timeout_s:g} s "
                           "limit (an endless loop?)" if time.monotonic() >= deadline
                           else _died(proc, index, deadline, memory_bytes))
                break
            try:
                data = json.loads(reply)
            except ValueError:
                data = {}
            if data.get("nonce") != nonce or data.get("index") != index:
                failure = (f"stopped at cell {index}: the grading process answered out of protocol "
                           "(the submission wrote to the grader's channel)")
                break
            done.append(CellRun(index, data.get("status", "error"), data.get("stdout", ""),
                                data.get("stderr", ""), data.get("ename", ""), data.get("evalue", ""),
                                list(data.get("traceback", [])), float(data.get("seconds", 0.0))))
    finally:
        _kill_group(proc)
        _kill_leftovers(env["NPU_LAB_GRADE_RUN"])
        replies.close()
        log.close()
    return SandboxRun(done, failure, time.monotonic() - start, user[2] if user else None)


def _read_reply(stream, deadline: float) -> bytes | None:
    """One reply line, or None at EOF or past the deadline."""
    buf = b""
    fd = stream.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf += chunk
        if b"\n" in buf:
            return buf.split(b"\n", 1)[0]


def _died(proc, index: int, deadline: float, memory_bytes) -> str:
    try:
        code = proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        return f"stopped at cell {index}: the grading process stopped answering"
    if code < 0:
        what = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        hint = "; over the memory limit?" if -code in (signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT) else ""
        return f"stopped at cell {index}: the grading process was killed by {what}{hint}"
    return (f"stopped at cell {index}: the grading process exited (code {code}; the submission called "
            "exit(), or ran out of memory"
            + (f" — the limit is {memory_bytes / 2**30:g} GB" if memory_bytes else "") + ")")


def _kill_group(proc) -> None:
    """Kill the child's whole session (it may have started processes of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _kill_leftovers(token: str) -> None:
    """Kill processes the submission started in a session of their own (``setsid``: out of the
    process group), found by the run's token in their environment (unless they erased it)."""
    mark = f"NPU_LAB_GRADE_RUN={token}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


# ------------------------------------------------------------------------------- the child
def _cut(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n... [{len(text) - MAX_OUTPUT_CHARS} more characters cut by the grader]\n"


def _child(reply_fd: int) -> int:
    import linecache
    import types
    from contextlib import redirect_stderr, redirect_stdout

    out = os.fdopen(reply_fd, "wb", buffering=0)
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    stdin = sys.stdin.buffer
    sys.stdin = io.StringIO("")            # a cell reading input() gets EOF, not the protocol
    while True:
        line = stdin.readline()
        if not line:
            return 0
        msg = json.loads(line)
        index, source, nonce = msg["index"], msg["source"], msg["nonce"]
        filename = f"<cell {index}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        stdout, stderr = io.StringIO(), io.StringIO()
        reply = {"index": index, "nonce": nonce, "status": "ok"}
        start = time.perf_counter()
        try:
            with redirect_stdout(stdout), redirect_stderr(stderr):
                exec(compile(source, filename, "exec"), main.__dict__)
        except BaseException as exc:       # SystemExit and KeyboardInterrupt too: the cell failed
            lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
            reply.update(status="error", ename=type(exc).__name__, evalue=str(exc)[:MAX_OUTPUT_CHARS],
                         traceback=[_cut("".join(lines))])
        reply.update(stdout=_cut(stdout.getvalue()), stderr=_cut(stderr.getvalue()),
                     seconds=time.perf_counter() - start)
        out.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    sys.exit(_child(int(sys.argv[1])))
