"""tools/kernel_start.py: nbval's kernels talk over Unix sockets, and a failed start is retried once, loudly."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

import kernel_start

pytestmark = pytest.mark.slow  # starts kernels
TOOLS = Path(__file__).resolve().parents[2] / "tools"


class _Specs(KernelSpecManager):
    def __init__(self, argv, **kwargs):
        super().__init__(**kwargs)
        self._argv = argv

    def get_kernel_spec(self, kernel_name):
        return KernelSpec(argv=self._argv, display_name="test", language="python")


def _transport_notebook(path: Path, expected: str) -> None:
    import nbformat  # here, not at the top: make check collects this file and runs none of it

    source = "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)"
    cell = nbformat.v4.new_code_cell(source)
    cell.execution_count = 1
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=expected + "\n")]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def _nbval(path: Path, *plugin: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TOOLS)}
    command = [sys.executable, "-m", "pytest", "--nbval", path.name, "-q", "-p", "no:cacheprovider", *plugin]
    return subprocess.run(command, cwd=path.parent, env=env, capture_output=True, text=True, timeout=600)


def test_nbval_kernels_use_unix_sockets_with_the_plugin_and_tcp_without(tmp_path):
    _transport_notebook(tmp_path / "ipc.ipynb", "ipc")
    with_plugin = _nbval(tmp_path / "ipc.ipynb", "-p", "kernel_start")
    assert with_plugin.returncode == 0, with_plugin.stdout[-3000:]
    without = _nbval(tmp_path / "ipc.ipynb")  # the same notebook on nbval's own start: the output says tcp
    assert without.returncode != 0 and "tcp" in without.stdout, without.stdout[-3000:]


def test_a_kernel_that_cannot_start_fails_twice_with_both_reasons_and_its_stderr():
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('no kernel here, on purpose'); sys.exit(3)"]
    with pytest.warns(kernel_start.KernelStartRetried, match="chapter 0 failed to start and is started once more"):
        with pytest.raises(kernel_start.KernelStartFailed) as failed:
            kernel_start.start_kernel("broken", "chapter 0", startup_timeout=60, kernel_spec_manager=_Specs(argv))
    message = str(failed.value)
    assert "chapter 0 failed to start 2 times" in message
    assert "attempt 1: RuntimeError: Kernel died" in message and "attempt 2: RuntimeError: Kernel died" in message
    assert message.count("no kernel here, on purpose") == 2


def test_a_kernel_that_fails_once_is_started_again_and_runs(tmp_path):
    marker = tmp_path / "failed-once"
    script = tmp_path / "kernel.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys
        if not os.path.exists({str(marker)!r}):
            open({str(marker)!r}, "w").close()
            sys.stderr.write("the first start fails, on purpose")
            sys.exit(3)
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", sys.argv[1]])
    """)
    )
    specs = _Specs([sys.executable, str(script), "{connection_file}"])
    with pytest.warns(kernel_start.KernelStartRetried, match="the first start fails, on purpose"):
        km, kc = kernel_start.start_kernel("flaky", "chapter 1", startup_timeout=120, kernel_spec_manager=specs)
    try:
        assert km.transport == "ipc" and Path(km.ip).parent.parent == kernel_start.socket_folder()
        reply = kc.execute_interactive("x = 6 * 7", timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_install_replaces_nbvals_kernel_once():
    import nbval.plugin

    before = nbval.plugin.RunningKernel
    try:
        kernel_start.install_into_nbval()
        installed = nbval.plugin.RunningKernel
        kernel_start.install_into_nbval()
        assert nbval.plugin.RunningKernel is installed and installed._starts_over_ipc
        assert issubclass(installed, nbval.kernel.RunningKernel)
    finally:
        nbval.plugin.RunningKernel = before
