"""The portability pass really runs on other kernels: the variables it sets are honoured by torch."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _portable_env() -> dict[str, str]:
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("PORTABLE_ENV :="))
    return dict(re.findall(r"(\w+)=(\S+)", line.split(":=", 1)[1]))


def test_the_portability_pass_switches_torch_to_its_portable_kernels_and_one_thread():
    env = _portable_env()
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["OMP_NUM_THREADS"] == "1", env
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**_clean_env(), **env}, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["DEFAULT", "1"], out


def _clean_env() -> dict[str, str]:
    drop = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {k: v for k, v in os.environ.items() if k not in drop}
