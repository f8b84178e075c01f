"""The API reference page documents every public name of transformer_lib."""

import re

import pytest

import transformer_lib as tl

from .conftest import SITE


def test_every_public_name_has_an_entry():
    page = SITE / "book" / "api.html"
    if not page.is_file():
        pytest.fail(f"{page} was not built; run `make book`")
    ids = set(re.findall(r'id="transformer_lib\.([\w.]+)"', page.read_text()))
    # "module.Name", "module.Class.method", "exercises.ch04_attention.check_attention": a public name is
    # documented when it is an object of a documented module, or the (sub)package itself
    documented = {part for i in ids for part in i.split(".")}
    missing = sorted(name for name in [*tl.__all__, *tl.viz.__all__] if name not in documented)
    assert not missing, f"public names without an API entry: {missing}"
    assert "(B, num_heads, T_q, T_k)" in page.read_text() or "(B, h, T_q, T_k)" in page.read_text()
