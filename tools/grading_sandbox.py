"""The operating-system sandbox each submission's kernel runs in while it is graded (bubblewrap, `bwrap`).

tools/grading.py runs nbgrader (the executing client, the gradebook, the hidden tests) in the grader's own process.
Only the student's kernel runs in the sandbox, started by `sandboxed_kernel_manager`, a jupyter_client kernel
manager whose command is wrapped in `bwrap`. What the kernel sees:

- read-only: the system's programs and libraries (/usr and its links), the few files of /etc a Python process
  reads, the Python installation and the virtual environment the grader runs in, and the grader's pristine copy
  of transformer_lib at `PACKAGE_ROOT` (first on PYTHONPATH);
- read-write: a private home folder (HOME, IPYTHONDIR, MPLCONFIGDIR; the kernel's working folder is inside it),
  a private /tmp, and one folder holding the kernel's connection file and sockets;
- nothing else: not the course folder (gradebook, source notebooks with their solutions, hidden tests), not the
  submissions, not the checkout, not the instructor's home folder. No network (a namespace of its own, with
  no interface but a loopback that is down). Its own process namespace, so every process it starts (a
  detached one too) is killed when the kernel ends, or when the grader does (`--die-with-parent`).
- limits: the address space (`ulimit -v`, default `MEMORY_MB`); the grader stops a cell that runs past its time
  limit, and kills the whole sandbox when the cell ignores the interrupt.

The kernel talks to the grader over Unix sockets in the shared folder (ZeroMQ's ipc transport), since it has no
network, and is interrupted by a message, not a signal, since it runs in a session of its own.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

PACKAGE_ROOT = "/grading/lib"  # where the pristine transformer_lib is, inside the sandbox
HOME = "/home/student"  # the private home folder, inside the sandbox
MEMORY_MB = 8192  # the kernel's address space (torch reserves more than it uses; 8 GB runs every chapter)
# what a Python process reads of /etc (the dynamic linker's cache, users and time zone, locale); nothing else
ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime", "hosts"]
ETC += ["locale.alias", "fonts", "mime.types", "ssl/openssl.cnf"]
# environment variables passed through from the grader (how torch, MKL and OpenMP choose kernels and threads)
PASSED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "LANG", "LC_ALL")
PASSED += ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TZ")


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot make namespaces here."""


def bwrap() -> str | None:
    """The bwrap program on PATH, or None."""
    return shutil.which("bwrap")


def check_available() -> str:
    """The path of a bwrap that works here; SandboxUnavailable naming what is missing and what to do otherwise."""
    import subprocess

    path = bwrap()
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, and make grade runs every submission in its sandbox. Install it "
            "(Debian and Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or, for a class you "
            "trust, grade without it: make grade SUBMISSIONS=... TRUSTED=1 (book/instructors.md says what that "
            "gives up)."
        )
    probe = [path, *_system_binds(), "--unshare-all", "--die-with-parent", "--", "/bin/true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"bwrap is installed ({path}) but could not make a sandbox here: {done.stderr.strip()[:300]}. It needs "
            "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or in a container "
            "--security-opt seccomp=unconfined). Or grade a class you trust with TRUSTED=1."
        )
    return path


def _system_binds() -> list[str]:
    """bwrap's arguments for the read-only system: /usr, the top-level links into it as links, and /etc's few."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ETC:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _python_binds() -> list[str]:
    """The Python installation and the virtual environment the grader runs in, read-only, at their own paths."""
    places = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix)}
    places |= {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    # the venv's python is a link to the base interpreter: bind the folder of each link's target too
    places.add(os.path.dirname(os.path.realpath(sys.executable)))
    # keep only the outermost folders (a venv inside the checkout binds the venv, not the checkout)
    keep = sorted(p for p in places if not any(p != q and p.startswith(q + os.sep) for q in places))
    args = []
    for place in keep:
        if not place.startswith("/usr/") and os.path.isdir(place):
            args += ["--ro-bind", place, place]
    if sys.prefix != os.path.realpath(sys.prefix) and os.path.isdir(sys.prefix):  # a venv reached through a link
        args += ["--ro-bind", sys.prefix, sys.prefix]
    return args


def command(kernel: list[str], run: Path, package: Path, home: Path, memory_mb: int = MEMORY_MB) -> list[str]:
    """The full command that runs `kernel` in a sandbox. `run` (connection file and sockets) is shared at its own
    path; `package` (a folder holding transformer_lib) is read-only at PACKAGE_ROOT; `home` is the private HOME."""
    path = check_available()
    env = {
        "HOME": HOME,
        "IPYTHONDIR": f"{HOME}/.ipython",
        "MPLCONFIGDIR": f"{HOME}/.config/matplotlib",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "PYTHONPATH": PACKAGE_ROOT,
        "TL_GRADING_PACKAGE": PACKAGE_ROOT,
        "PYTHONDONTWRITEBYTECODE": "1",
        "USER": "student",
        "LOGNAME": "student",
    }
    env.update({k: os.environ[k] for k in PASSED if k in os.environ})
    args = [path, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    # bwrap mounts in order, a later mount over an earlier one: the private /tmp first, so that a Python environment
    # or a grading folder that lives under /tmp (a checkout in /tmp, the grader's own temporary folder) stays visible
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += _system_binds() + _python_binds()
    args += ["--ro-bind", str(package), PACKAGE_ROOT]
    args += ["--bind", str(home), HOME, "--bind", str(run), str(run)]
    args += ["--remount-ro", "/", "--chdir", f"{HOME}/work"]  # the sandbox's own root read-only too
    # the address-space limit, set by a shell inside the sandbox before it becomes the kernel
    limit = f'ulimit -v {int(memory_mb) * 1024} && exec "$@"'
    return [*args, "--", "/bin/sh", "-c", limit, "sandbox", *kernel]


def prepare_home(home: Path, matplotlib_cache: Path | None = None) -> None:
    """An empty private home folder with a working folder, and matplotlib's font list copied in (built once per
    grading run, so that no kernel spends seconds rebuilding it)."""
    (home / "work").mkdir(parents=True, exist_ok=True)
    (home / ".ipython").mkdir(exist_ok=True)
    config = home / ".config" / "matplotlib"
    config.mkdir(parents=True, exist_ok=True)
    if matplotlib_cache is not None:
        for item in matplotlib_cache.glob("fontlist-*.json"):
            shutil.copy(item, config / item.name)


def matplotlib_cache(folder: Path) -> Path:
    """matplotlib's font list, built once into `folder` by a plain Python process."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MPLCONFIGDIR=str(folder))
    subprocess.run([sys.executable, "-c", "import matplotlib.font_manager"], env=env, check=False, timeout=300)
    return folder


def sandboxed_kernel_manager(run: Path, package: Path, home: Path, memory_mb: int = MEMORY_MB, log: Path | None = None):
    """A jupyter_client kernel manager class whose kernels start in the sandbox (one class per submission). The
    kernel's own standard output and error (not its cells', which reach the notebook) go to `log`."""
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        """Starts ipykernel inside bwrap; ZeroMQ over Unix sockets in `run`; interrupts by message."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport = "ipc"
            self.ip = str(run / "kernel")  # the sockets are this path with -1, -2, ... appended
            self.connection_file = str(run / "kernel.json")

        @property
        def kernel_spec(self):
            return KernelSpec(
                argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                display_name="Python 3 (grading sandbox)",
                language="python",
                interrupt_mode="message",  # a signal would reach bwrap, not the kernel in its own session
            )

        def format_kernel_cmd(self, extra_arguments=None):
            kernel = super().format_kernel_cmd(extra_arguments)
            return command(kernel, run, package, home, memory_mb)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            if log is not None:
                kw["stdout"] = kw["stderr"] = open(log, "ab")  # noqa: SIM115 (the kernel process holds it)
            return await super()._async_launch_kernel(kernel_cmd, **kw)

    return SandboxedKernelManager
