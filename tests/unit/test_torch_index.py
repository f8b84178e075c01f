"""tools/torch_index.py: which torch build `make` installs. The decision is tested here; the download is not
(PyTorch's CPU index is not reachable from CI's machines)."""

from __future__ import annotations

import pytest

import torch_index

CPU = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def _decide(backend="auto", *, system="Linux", gpu=False, sources=(), version="2.13.0"):
    return torch_index.pip_arguments(backend, system=system, gpu=gpu, sources=list(sources), version=version)


def test_a_linux_machine_without_a_gpu_gets_the_cpu_index():
    assert _decide() == CPU
    assert _decide(sources=["https://pypi.org/simple"]) == CPU  # a remote index says nothing of the CPU wheel


def test_a_gpu_macos_and_windows_keep_pypis_wheel():
    assert _decide(gpu=True) == []
    assert _decide(system="Darwin") == [] and _decide(system="Windows") == []


def test_the_backend_can_be_asked_for():
    assert _decide("cuda") == []
    assert _decide("CPU", gpu=True) == CPU
    assert _decide("cu126") == ["--extra-index-url", "https://download.pytorch.org/whl/cu126"]
    with pytest.raises(ValueError, match="TORCH_BACKEND must be one of .*got 'rocm'"):
        _decide("rocm")


def test_a_cpu_wheel_that_pip_already_has_adds_no_index(tmp_path):
    """As on CI's machines: the pinned CPU wheel in a find-links folder, so no index to wait on."""
    links = tmp_path / "wheels"
    links.mkdir()
    (links / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert _decide(sources=[str(links)]) == []
    assert _decide(sources=[links.as_uri()]) == []
    assert _decide(sources=[str(links)], version="2.14.1") == CPU  # another version: not the pinned one
    assert _decide(sources=["https://download.pytorch.org/whl/cpu/"]) == []


def test_a_local_index_is_read_for_the_cpu_wheel(tmp_path):
    page = tmp_path / "simple" / "torch"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text('<a href="../f/torch-2.14.1-cp311-none.whl">torch-2.14.1</a>')
    assert _decide(sources=[(tmp_path / "simple").as_uri()]) == CPU  # the CUDA build only
    page.joinpath("index.html").write_text('<a href="x">torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl</a>')
    assert _decide(sources=[(tmp_path / "simple").as_uri()]) == []


def test_the_pin_is_read_from_the_constraints(tmp_path):
    path = tmp_path / "constraints.txt"
    path.write_text("numpy==2.0\ntorch==2.13.0\ntorchvision==0.28\n")
    assert torch_index.pinned_version(path) == "2.13.0"
    path.write_text("numpy==2.0\n")
    assert torch_index.pinned_version(path) is None
    assert torch_index.pinned_version() is not None  # the repository's own lock pins torch
