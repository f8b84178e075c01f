"""Start Jupyter kernels for the test run so that a busy machine cannot fail a notebook before its first cell.

A fresh clone's `make test` once failed in the portable notebook pass: the kernel of 13_inside did not
answer within nbval's 60 s, and all 36 of its cells errored; the same stage passed at once when run
again. Another process was copying 2.4 GB on the machine at the time. Three things made a start fragile:

- **Ports.** jupyter_client picks five TCP ports by binding to port 0 and letting go; the kernel binds
  them a moment later. With two pytest-xdist workers (and the book tests' own kernels) starting kernels
  at once, another process can take a port in between, and that kernel dies at its start. Here every
  kernel talks over ZeroMQ's ipc transport instead: Unix sockets in a folder of this process's own,
  so there is no port to race for.
- **The clock.** On a loaded machine a kernel's first import can take longer than 60 s. Waiting is not
  a failure: the start waits up to STARTUP_TIMEOUT_S (300 s, the same as one cell's limit).
- **Silence.** nbval sends the kernel's own standard error to /dev/null, so a kernel that died said
  nothing. It goes to a log file here, and a failed start quotes its end.

What load alone can still do (a start slower than five minutes) is retried once, loudly: a warning in
pytest's summary names the notebook and why the first start failed. A second failure fails the notebook
with both reasons. `install_into_nbval()` puts this start into nbval: conftest.py calls it under --nbval,
as this module does as a pytest plugin (-p kernel_start). `IpcKernelManager` is the same transport for
nbclient's NotebookClient (kernel_manager_class=).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from queue import Empty

from jupyter_client.manager import AsyncKernelManager, KernelManager

STARTUP_TIMEOUT_S = 300
IOPUB_TIMEOUT_S = 120  # after the kernel answers, until its output channel is seen to work
ATTEMPTS = 2
_SOCKETS: list[Path] = []  # this process's socket folder, made on first use (a Unix socket path must stay short)


class KernelStartRetried(UserWarning):
    """A kernel failed to start once and was started again; the message says which and why."""


class KernelStartFailed(RuntimeError):
    """A kernel failed to start twice; the message gives both reasons and the end of its standard error."""


def socket_folder() -> Path:
    """A short, private folder for this process's kernel sockets (under /tmp: Unix socket paths are limited to
    107 bytes, and a checkout's path can be long)."""
    if not _SOCKETS:
        _SOCKETS.append(Path(tempfile.mkdtemp(prefix="tlk-", dir="/tmp" if os.path.isdir("/tmp") else None)))
        atexit.register(shutil.rmtree, _SOCKETS[0], ignore_errors=True)
    return _SOCKETS[0]


def _use_ipc(manager) -> None:
    folder = Path(tempfile.mkdtemp(prefix="k", dir=socket_folder()))
    manager.transport = "ipc"
    manager.ip = str(folder / "s")  # ZeroMQ's sockets are this path with -1, -2, ... appended


class IpcKernelManager(AsyncKernelManager):
    """nbclient's default kernel manager, talking over Unix sockets instead of TCP ports."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _use_ipc(self)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no standard error was written)"
    return "\n".join(text.splitlines()[-lines:]) or "(its standard error is empty)"


def _ensure_iopub(kc, timeout: float) -> None:
    """nbval's check that the kernel's output channel works, with a deadline that suits a busy machine:
    send kernel_info until its idle status arrives on IOPub."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg_id = kc.kernel_info()
        try:
            while True:
                msg = kc.get_iopub_msg(timeout=1)
                if (
                    msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"
                ):
                    return
        except Empty:
            continue
    raise RuntimeError(f"the kernel answered, but its output channel (IOPub) stayed silent for {timeout:.0f} s")


def start_kernel(
    kernel_name: str,
    label: str,
    cwd: str | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_S,
    kernel_spec_manager=None,
):
    """Start a kernel over ipc and wait until it answers; retry once, with a warning, if it does not.

    Returns (KernelManager, started BlockingKernelClient). `label` names what the kernel is for (a
    notebook's path) in the warning and the error.
    """
    reasons = []
    for attempt in range(1, ATTEMPTS + 1):
        km = KernelManager(
            kernel_name=kernel_name,
            **({"kernel_spec_manager": kernel_spec_manager} if kernel_spec_manager is not None else {}),
        )
        _use_ipc(km)
        log = Path(km.ip).parent / "stderr.log"
        kc = None
        try:
            with open(log, "ab") as stderr:
                km.start_kernel(stderr=stderr, cwd=cwd)
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=startup_timeout)
            _ensure_iopub(kc, IOPUB_TIMEOUT_S)
            return km, kc
        except Exception as error:  # noqa: BLE001 (any failure to start is retried once and then reported)
            reasons.append(
                f"attempt {attempt}: {type(error).__name__}: {error}\n  its standard error ends:\n"
                + "\n".join("    " + line for line in _tail(log).splitlines())
            )
            if kc is not None:
                kc.stop_channels()
            try:
                km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 (a kernel that never started may have nothing to shut down)
                pass
            if attempt < ATTEMPTS:
                warnings.warn(
                    KernelStartRetried(
                        f"the kernel for {label} failed to start and is started once more; " + reasons[-1]
                    ),
                    stacklevel=2,
                )
    raise KernelStartFailed(f"the kernel for {label} failed to start {ATTEMPTS} times:\n" + "\n".join(reasons))


def install_into_nbval() -> None:
    """Make nbval start every notebook's kernel with start_kernel (idempotent). nbval 0.11 builds a
    RunningKernel(kernel_name, cwd=, startup_timeout=) in IPyNbFile.setup; the subclass keeps every method
    of nbval's and replaces only the start."""
    import nbval.plugin
    from nbval.kernel import NbvalKernelspecManager, RunningKernel

    if getattr(nbval.plugin.RunningKernel, "_starts_over_ipc", False):
        return

    class ReliableRunningKernel(RunningKernel):
        _starts_over_ipc = True

        def __init__(self, kernel_name, cwd=None, startup_timeout=STARTUP_TIMEOUT_S):
            label = f"a notebook in {cwd}" if cwd else "a notebook"  # pytest's report names the notebook
            self.km, self.kc = start_kernel(
                kernel_name,
                label,
                cwd=cwd,
                startup_timeout=max(float(startup_timeout), STARTUP_TIMEOUT_S),
                kernel_spec_manager=NbvalKernelspecManager(),
            )

    nbval.plugin.RunningKernel = ReliableRunningKernel


def pytest_configure(config) -> None:
    """As a pytest plugin (conftest.py's pytest_plugins, or -p kernel_start): nbval's kernels start here."""
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        install_into_nbval()
