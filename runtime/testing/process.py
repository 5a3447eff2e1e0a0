"""A program run as a child process for a test or a benchmark: its own process group,
its output in a log file, its resource use, and no orphan if the parent dies.

:class:`ChildProcess` starts a command in a new session (so :meth:`ChildProcess.stop`
signals the whole group) with :func:`die_with_parent` before exec (Linux: the kernel
sends it SIGKILL when the parent dies, so a killed test leaves nothing behind), and
reads what it uses from ``/proc``:

- :meth:`ChildProcess.cpu_seconds`: user + system CPU of the process **and of its
  children it has waited for** (``utime + stime + cutime + cstime``, fields 14-17 of
  ``proc(5)``'s ``stat``), since it started. One definition, so figures of different
  programs compare: an operator that forks work out is charged for it;
- :meth:`ChildProcess.memory_mib`: ``VmHWM`` (peak RSS) or ``VmRSS`` (now) of
  ``/proc/<pid>/status``.

>>> import pathlib, sys, tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     child = ChildProcess([sys.executable, "-c", "print('hello')"],
...                          log_path=pathlib.Path(tmp) / "child.log")
...     code = child.popen.wait(30)
...     code, child.tail()
(0, 'hello')
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence

__all__ = ["ChildExited", "ChildProcess", "cpu_seconds", "die_with_parent", "tail"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Run in a child before exec (``preexec_fn``): SIGKILL when the parent dies (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def tail(path: pathlib.Path, lines: int = 30) -> str:
    """The last ``lines`` lines of the text file ``path`` (empty when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ChildExited(RuntimeError):
    """The child exited when it should be running; the message ends with its log's tail."""


class ChildProcess:
    """``command`` running as a child (see the module docstring); ``name`` is how errors
    call it, ``env`` its whole environment (default: this process's)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        log_path: pathlib.Path,
        name: str | None = None,
        cwd: pathlib.Path | str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name or pathlib.Path(command[0]).name
        self.log_path = log_path
        with open(log_path, "wb") as out:
            self.popen = subprocess.Popen(
                list(command),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of its output."""
        return tail(self.log_path, lines)

    def check_alive(self) -> None:
        """:class:`ChildExited` if it has exited."""
        if self.popen.poll() is not None:
            raise ChildExited(
                f"{self.name} exited with code {self.popen.returncode}; last lines of its log "
                f"({self.log_path}):\n{self.tail()}"
            )

    def memory_mib(self, field: str = "VmHWM") -> float:
        """``field`` of ``/proc/<pid>/status`` in MiB (``VmHWM``: peak RSS; ``VmRSS``: now)."""
        for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        raise ChildExited(f"no {field} in /proc/{self.pid}/status")

    def cpu_seconds(self) -> float:
        """CPU seconds of the process and its waited-for children (see the module docstring)."""
        return cpu_seconds(self.pid)

    def stop(self, timeout: float = 30.0) -> float:
        """SIGTERM to its group, SIGKILL after ``timeout`` (and to what the group still holds
        once it exited); the seconds it took to exit."""
        started = time.monotonic()
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if self.popen.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(wait)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # what the group still holds
        return time.monotonic() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of any process ``pid`` and its waited-for children, from
    ``/proc/<pid>/stat`` (``OSError`` once it is gone).

    >>> cpu_seconds(os.getpid()) >= 0
    True
    """
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rpartition(")")[2].split()  # after ")" the fields start at number 3
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
