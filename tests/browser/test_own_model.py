"""The reader's own models in the pages: a freshly trained language model, written by tl.export.for_playground,
loaded through the file picker or dropped on the language-model page, writes PyTorch's text; a freshly trained
bracket classifier gives PyTorch's P(balanced) on the brackets page. Bad files get messages that name what was
expected and what came, and the page keeps the model it had.

The models are trained here, in a few seconds (two small layers: 150 steps on the plays, 100 on brackets), so
that the files are ones the book never shipped: their answers can only be right if the pages read the files.
"""

from __future__ import annotations

import base64
import struct

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from playground_build.common import greedy_with_margin
from transformer_lib import recipes

from .checks import network_problems
from .test_playground import _open, _set_range, _status_after, _write_greedy, expected  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser
PROMPTS = ["ROMEO:\n", "To be, or ", "JULIET.\nO ", "The king "]  # the first whose greedy text has no near tie
NEW = 40  # characters written: prompt and text fit the small model's 64 positions


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> dict:
    """A small language model trained now, its .playground file, and PyTorch's greedy text and first probabilities."""
    tok, train, _ = recipes.shakespeare_data("char")
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(
        vocab_size=len(tok.itos), d_model=48, num_heads=2, num_layers=2, d_ff=96, max_len=64, dropout=0.0
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        starts = torch.randint(0, len(train) - 65, (16,), generator=g).tolist()
        batch = torch.stack([train[s : s + 65] for s in starts])  # (16, 65)
        logits = model(batch[:, :-1])  # (16, 64, V)
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    path = tl.export.for_playground(model, tok, "my_model", tmp_path_factory.mktemp("own"))
    for prompt in PROMPTS:
        ids = torch.tensor([tok.encode(prompt)])  # (1, T0)
        out, margin = greedy_with_margin(model, ids, NEW)
        if margin >= 1e-3:  # onnxruntime's rounding cannot swap the likeliest character anywhere on the way
            break
    else:
        pytest.fail(f"every prompt's greedy text passes a near tie: {PROMPTS}")
    with torch.no_grad():
        probs = model(ids)[0, -1].softmax(-1)  # (V,): the first step's probabilities
    top = probs.argsort(descending=True)[:8].tolist()
    return {
        "path": path,
        "prompt": prompt,
        "text": tok.decode(out[0, ids.shape[1] :]),
        "first": [(tok.itos[i], float(probs[i])) for i in top],
        "parameters": sum(p.numel() for p in model.parameters()),
    }


def _drop(page, name: str, data: bytes | None = None, size: int | None = None) -> None:
    """Drop a file on the language-model page's box, as a reader dragging it there: `data`, or `size` zero bytes."""
    _drop_on(page, "lm-own", name, data, size)


def _drop_on(page, zone: str, name: str, data: bytes | None = None, size: int | None = None) -> None:
    """Drop a file on the box `zone` (its id), as a reader dragging it there: `data`, or `size` zero bytes."""
    page.evaluate(
        """([zoneId, name, b64, size]) => {
            const bytes = b64 === null ? new Uint8Array(size) : Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name));
            const zone = document.getElementById(zoneId);
            zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: transfer, bubbles: true, cancelable: true }));
            zone.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
        }""",
        [zone, name, None if data is None else base64.b64encode(data).decode(), size],
    )


def _loaded(page, name: str) -> str:
    """Wait until the page says that it runs the model `name`; return what it says."""
    page.wait_for_function(
        "name => document.getElementById('lm-own-info').textContent.startsWith(`Your model “${name}”`)",
        arg=name,
        timeout=60_000,
    )
    return page.text_content("#lm-own-info")


def test_a_freshly_trained_model_picked_from_disk_writes_pytorchs_text(page, site_url, own):
    _open(page, site_url, "shakespeare_char")
    page.set_input_files("#lm-own-file", str(own["path"]))
    said = _loaded(page, "my_model")
    assert f"{own['parameters']:,} parameters" in said, said
    assert "a vocabulary of 84 tokens and 64 positions" in said and "nothing was uploaded" in said, said
    page.wait_for_function("() => window.playgroundTimings.own?.first_answer_ms !== undefined", timeout=60_000)
    assert _write_greedy(page, own["prompt"], NEW) == own["text"]
    page.fill("#lm-length", "1")  # the first step's table: the eight likeliest characters and their probabilities
    _status_after(page, "lm-status", lambda: page.click("#lm-generate"))
    rows = page.eval_on_selector_all(
        "#lm-candidates tbody tr", "rows => rows.map(r => [r.cells[0].textContent, +r.cells[1].textContent])"
    )
    shown = {" ": "␣", "\n": "↵"}
    assert [c for c, _ in rows] == [shown.get(c, c) for c, _ in own["first"]]
    assert all(abs(p - q) <= 6e-4 for (_, p), (_, q) in zip(rows, own["first"])), (rows, own["first"])
    assert not network_problems(page)


def test_a_dropped_file_loads_too_and_the_book_model_comes_back(page, site_url, own, expected):  # noqa: F811
    _open(page, site_url, "shakespeare_char")
    _drop(page, "my_model.playground", own["path"].read_bytes())
    _loaded(page, "my_model")
    assert _write_greedy(page, own["prompt"], NEW) == own["text"]
    page.click("#lm-own-reset")
    page.wait_for_function("() => document.getElementById('lm-own-info').textContent.includes(\"book's model\")")
    case = expected["shakespeare_char"]["greedy"][0]
    assert _write_greedy(page, case["prompt"], case["new"]) == case["text"]
    assert not network_problems(page)


def _with_header(data: bytes, **changes) -> bytes:
    """The .playground bytes `data` with its header's fields changed."""
    import json

    start = len(tl.export.PLAYGROUND_MAGIC)
    version, n = struct.unpack("<II", data[start : start + 8])
    header = json.loads(data[start + 8 : start + 8 + n])
    text = json.dumps({**header, **changes}).encode()
    return data[:start] + struct.pack("<II", version, len(text)) + text + data[start + 8 + n :]


def _bad_files(data: bytes) -> list[tuple[str, bytes | int, str]]:
    """(file name, its bytes or a size in zero bytes, words the message must hold) for each kind of bad file."""
    magic = len(tl.export.PLAYGROUND_MAGIC)
    return [
        ("notes.txt", b"To be, or not to be", "is not a playground file"),
        ("model.onnx", b"\x08\x07\x12\x07pytorch", "An ONNX file alone has no tokenizer"),
        ("huge.playground", tl.export.PLAYGROUND_MAX_BYTES + 1, "of up to 64.00 MB"),
        ("short.playground", data[: len(data) // 2], "is cut short"),
        ("future.playground", data[:magic] + struct.pack("<I", 9) + data[magic + 4 :], "format version 9"),
        ("classifier.playground", _with_header(data, kind="encoder_classifier"), "holds a model of kind"),
        ("damaged.playground", _with_header(data, max_len=0), "its max_len is 0"),
    ]


def test_bad_files_get_messages_and_the_page_keeps_its_model(page, site_url, own, expected):  # noqa: F811
    _open(page, site_url, "shakespeare_char")
    for name, data, words in _bad_files(own["path"].read_bytes()):
        page.eval_on_selector("#lm-own-error", "e => { e.textContent = ''; }")
        if isinstance(data, int):
            _drop(page, name, size=data)
        else:
            _drop(page, name, data)
        page.wait_for_function("() => document.getElementById('lm-own-error').textContent !== ''", timeout=60_000)
        message = page.text_content("#lm-own-error")
        assert words in message and f"“{name}”" in message, (name, message)
        assert page.get_attribute("#lm-own-file", "aria-invalid") == "true"
        assert "runs the book's model" in page.text_content("#lm-own-info")
    case = expected["shakespeare_char"]["greedy"][0]
    assert _write_greedy(page, case["prompt"], case["new"]) == case["text"]  # still the book's model
    assert not network_problems(page)
    assert not page.console_errors, page.console_errors  # the reader's mistakes are messages, not errors


BRACKET_STRINGS = ["[[()]]", "([)]", "(()", "[]()[[]]"]


@pytest.fixture(scope="module")
def own_brackets(tmp_path_factory) -> dict:
    """A small bracket classifier trained now, as chapter 8 trains one, its .playground file, and PyTorch's
    P(balanced) on BRACKET_STRINGS."""
    tok, x_train, y_train, _, _ = recipes.bracket_classifier_data()
    torch.manual_seed(0)
    model = tl.EncoderClassifier(
        vocab_size=tok.vocab_size, num_classes=2, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0,
        max_len=32, norm_first=True,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(100):
        rows = torch.randint(0, len(x_train), (64,), generator=g)
        loss = F.cross_entropy(model(x_train[rows]), y_train[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    path = tl.export.for_playground(model, tok, "my_brackets", tmp_path_factory.mktemp("brackets"))
    with torch.no_grad():
        p = {s: float(model(torch.tensor([[tok.bos_id, *tok.encode(s)]])).softmax(-1)[0, 1]) for s in BRACKET_STRINGS}
    return {"path": path, "p": p}


def test_a_freshly_trained_bracket_classifier_gives_pytorchs_probabilities(page, site_url, own_brackets, own):
    _open(page, site_url, "bracket_classifier")
    page.set_input_files("#brackets-own-file", str(own_brackets["path"]))
    page.wait_for_function(
        "() => document.getElementById('brackets-own-info').textContent.startsWith('Your model “my_brackets”')",
        timeout=60_000,
    )
    assert "for your model, on the string in the field" in page.text_content("#brackets-partner")
    for text, p in own_brackets["p"].items():
        page.fill("#brackets-text", text)
        status = _status_after(page, "brackets-status", lambda: page.press("#brackets-text", "Enter"))
        assert status.startswith(text), status
        shown = float(page.text_content("#brackets-probability"))
        assert abs(shown - p) <= 6e-5, (text, shown, p)  # the page shows 4 decimals
    _drop_on(page, "brackets-own", "my_model.playground", own["path"].read_bytes())  # a language model: refused
    page.wait_for_function("() => document.getElementById('brackets-own-error').textContent !== ''")
    message = page.text_content("#brackets-own-error")
    assert "holds a language model" in message and "this page runs a bracket classifier" in message, message
    assert page.text_content("#brackets-own-info").startswith("Your model “my_brackets”")  # still the reader's
    assert not network_problems(page)


@pytest.fixture(scope="module")
def own_vit(tmp_path_factory) -> dict:
    """Chapter 16's ViT trained now for 60 steps (seed 1, not the book's), written for the draw-a-digit page."""
    vit = recipes.digits_vit(seed=1)
    recipes.train_digits_vit(vit, steps=60, seed=1)
    vit.eval()
    return {"model": vit, "path": tl.export.for_playground(vit, None, "my_vit", tmp_path_factory.mktemp("vit"))}


def test_a_freshly_trained_vit_reads_the_drawing_as_pytorch(page, site_url, own_vit):
    from .test_draw_digit import _answered, _shown_probabilities

    response = page.goto(f"{site_url}/book/playground/draw_digit.html", wait_until="load")
    assert response is not None and response.status == 200
    page.wait_for_function("() => window.playgroundTimings?.draw_digit?.first_answer_ms !== undefined", timeout=120_000)
    pixels = page.get_attribute("#draw-grid", "data-pixels")
    book = _shown_probabilities(page)
    page.set_input_files("#draw-own-file", str(own_vit["path"]))
    page.wait_for_function(
        "() => document.getElementById('draw-own-info').textContent.startsWith('Your model “my_vit”')", timeout=60_000
    )
    assert "reads 8 × 8 images in patches of 2 × 2 and tells 10 classes" in page.text_content("#draw-own-info")
    first_p = "book => Math.abs(Number(document.querySelector('#draw-probs tr[data-p]').dataset.p) - book)"
    page.wait_for_function(f"{first_p} > 1e-9", arg=book[0], timeout=60_000)  # the new model's answer is in
    _answered(page, pixels)
    counts = torch.tensor([int(v) for v in pixels.split(",")], dtype=torch.float32).reshape(1, 1, 8, 8)  # (1, 1, 8, 8)
    with torch.no_grad():
        expected = own_vit["model"](counts / 16).softmax(-1)[0].tolist()  # the page reads count / 16
    shown = _shown_probabilities(page)
    assert max(abs(p - q) for p, q in zip(shown, expected)) < 1e-5, (shown, expected)
    assert max(abs(p - q) for p, q in zip(shown, book)) > 1e-3  # not the book's model any more
    page.click("#draw-own-reset")
    page.wait_for_function(f"{first_p} < 1e-9", arg=book[0])  # the book's model's answer again
    assert not network_problems(page)


@pytest.fixture(scope="module")
def own_emoji(tmp_path_factory) -> dict:
    """An untrained language model whose vocabulary holds an emoji (two UTF-16 units, one character), 16 positions,
    and a prompt of 15 characters, one of them the emoji: PyTorch's one greedy character after it."""
    tok = tl.CharTokenizer.from_texts(["abcdefgh 🙂"])
    torch.manual_seed(3)
    model = tl.DecoderOnlyLM(
        vocab_size=len(tok.itos), d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=16, dropout=0.0
    ).eval()
    path = tl.export.for_playground(model, tok, "emoji_model", tmp_path_factory.mktemp("emoji"))
    for shift in range(8):
        prompt = ("abcdefgh" * 2)[shift : shift + 7] + "🙂" + "hgfedcba"[:7]  # 15 characters, 16 UTF-16 units
        out, margin = greedy_with_margin(model, torch.tensor([tok.encode(prompt)]), 1)
        if margin >= 1e-3:
            break
    else:
        pytest.fail("every prompt's greedy character is a near tie")
    assert len(prompt) == 15 and len(prompt.encode("utf-16-le")) // 2 == 16
    return {"path": path, "prompt": prompt, "text": tok.decode(out[0, -1:])}


def test_a_prompt_with_an_emoji_is_counted_in_characters(page, site_url, own_emoji):
    """A prompt of 15 characters, one an emoji, fills a 16-position model with one more character: the page takes it
    (counted in UTF-16 units it would be 16 + 1, one too many) and writes PyTorch's character; one more character in
    the prompt is refused, counted in characters."""
    _open(page, site_url, "shakespeare_char")
    page.set_input_files("#lm-own-file", str(own_emoji["path"]))
    _loaded(page, "emoji_model")
    assert _write_greedy(page, own_emoji["prompt"], 1) == own_emoji["text"]  # refused, counted in UTF-16 units
    page.fill("#lm-prompt", own_emoji["prompt"] + "a")  # one character too many
    page.click("#lm-generate")
    page.wait_for_function("() => document.getElementById('lm-error').textContent !== ''", timeout=10_000)
    said = page.text_content("#lm-error")
    assert "The prompt has 16 characters and you asked for 1 more: 17, more than the model's 16 positions" in said
    assert not network_problems(page)
