"""The assistant page (book/playground/assistant.md): chapter 17's three models answer one user line side by side.

The three share chapter 10's architecture and the chat tokenizer (transformer_lib.chat): the base model
(recipes.assistant_base: the character model with the three chat tokens added, their rows untrained), the SFT model
and the GRPO model (the checkpoints assistant_sft and assistant_grpo). Each is exported as a step model with a KV
cache, as the language-model page's (transformer_lib.export.export_step; checked call by call up to the models' last
position, common.check_steps), one file each: models/assistant_<name>_step.onnx. One graph with three sets of
weights would save only the graph's second and third copies (about 0.09 MB each, next to 3.3 MB of weights per
model in fp32); three files keep one model per file, as every other page has, so each is loaded, tried in int8 and
tested as they are.

The page wraps the reader's line in the chat template (ChatTokenizer.encode_chat: <|user|> line <|assistant|>) and
decodes greedily with the cache until <|end|> or MAX_ANSWER new tokens, as chat.sample_answers does; the answer is
what decode_answer keeps of them. The build records PyTorch's answers (chat.sample_answers and decode_answer) on
LINES, the page's default line and its example buttons first (EXAMPLES), each with the right answer by program where
the line is one of the three tasks (chat.solve), and the longest line the models can answer (LONGEST, all 128
positions with the template and the answer). Each model's int8 file ships when its answers are PyTorch's, id for id,
on all AGREEMENT lines: LINES, then seeded task lines on the held-out words.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx
import torch

import transformer_lib as tl
from transformer_lib import chat, recipes
from transformer_lib.export import export_step

from .common import AGREEMENT, check_steps, greedy_onnx, greedy_with_margin, page_defaults, specials, try_int8

PAGE = page_defaults("assistant")  # the form's starting value: {"assistant-line": "reverse night"}
# the page's buttons, the default first: two tasks on training words, a held-out word that GRPO gets right and SFT
# does not, and a line that is no task
EXAMPLES = [PAGE["assistant-line"], "shout crown", "count honour", "shout tenants", "what is love"]
# beyond the buttons: a held-out word that SFT gets right and GRPO does not, a word longer than any asked about in
# training, a task with a capital (no checker: chat.solve reads the task as written), a word of two
MORE = ["reverse tailor", "count wherefore", "Reverse night", "reverse night sky"]
MAX_LEN = 128  # the models' positions (chapter 10's model): <|user|>, the line, <|assistant|> and MAX_ANSWER new tokens
LONGEST = ("To be, or not to be, that is the question: " * 3)[: MAX_LEN - 2 - chat.MAX_ANSWER]  # 118 characters
LINES = list(dict.fromkeys([*EXAMPLES, *MORE, LONGEST]))
MODELS: dict[str, Callable[[], torch.nn.Module]] = {  # meta.json's keys, in the page's order, and how to load each
    "assistant_base": lambda: recipes.assistant_base()[0],
    "assistant_sft": lambda: tl.load_checkpoint("assistant_sft")[0],
    "assistant_grpo": lambda: tl.load_checkpoint("assistant_grpo")[0],
}
NEAR_TIE = 1e-3  # the smallest gap between the two likeliest logits a recorded answer may pass on its way


def _right(line: str) -> str | None:
    """The right answer by program (chat.solve), or None where the line is not one of the three tasks."""
    try:
        return chat.solve(line)
    except ValueError:
        return None


def _answers(key: str, model, tok: chat.ChatTokenizer) -> dict[str, dict]:
    """PyTorch's answers of one model on LINES: {line: {"ids": what it wrote, up to <|end|> or MAX_ANSWER ids,
    "text": decode_answer's, "margin": the closest tie on the way}}, chat.sample_answers's and equal to one line at
    a time with model.generate (common.greedy_with_margin), which also finds the near ties."""
    written = chat.sample_answers(model, tok, LINES)  # greedy, the lines of one length in one batch
    answers = {}
    for line, ids in zip(LINES, written):
        prompt = torch.tensor([tok.encode_chat(line)[0]])  # (1, T0): <|user|> line <|assistant|>
        out, margin = greedy_with_margin(model, prompt, chat.MAX_ANSWER, stop=tok.end_id)
        alone = out[0, prompt.shape[1] :].tolist()
        alone = alone[: alone.index(tok.end_id) + 1] if tok.end_id in alone else alone
        if alone != ids:
            raise SystemExit(f"{key}: {line!r} is answered {ids} in a batch and {alone} alone; pick another line")
        if margin < NEAR_TIE:
            raise SystemExit(f"{key}: the answer to {line!r} passes a near tie ({margin:.1e}); pick another line")
        answers[line] = {"ids": ids, "text": tok.decode_answer(ids), "margin": margin}
    return answers


def _graph_bytes(path: Path) -> int:
    """The size of the ONNX file `path` without its weights: the graph alone, written with every tensor elsewhere."""
    with tempfile.TemporaryDirectory() as folder:
        graph = Path(folder) / "graph.onnx"
        onnx.save(onnx.load(path), graph, save_as_external_data=True, location="weights", size_threshold=0)
        return graph.stat().st_size


def _export(key: str, model, tok: chat.ChatTokenizer, models: Path, trial_lines: list[str]) -> tuple[Path, dict]:
    """Write one model's step file into `models` (int8 where its answers on `trial_lines` stay PyTorch's);
    -> (the shipped file, its entry of meta.json)."""
    path = export_step(model, models / f"{key}_step.onnx")
    graph_bytes = _graph_bytes(path)  # what one graph for the three models would save on each further model
    prompt = tok.encode_chat(LONGEST)[0]
    sequence = model.generate(torch.tensor([prompt]), chat.MAX_ANSWER, temperature=0.0)  # (1, max_len)
    gap = check_steps(path, model, sequence, len(prompt))  # every position the model has, one call each
    cases = [tok.encode_chat(line)[0] for line in trial_lines]
    reference = chat.sample_answers(model, tok, trial_lines)
    path, int8 = try_int8(
        path,
        f"the answer's ids identical, up to <|end|> or {chat.MAX_ANSWER} tokens",
        cases,
        reference,
        lambda session, ids: greedy_onnx(session, model, ids, chat.MAX_ANSWER, stop=tok.end_id),
    )
    if int8["shipped"] == "int8":  # the int8 file's own distance from PyTorch, measured the same way, not held
        gap = check_steps(path, model, sequence, len(prompt), tolerance=None)
    attn = model.decoder.layers[0].self_attn
    cfg = model.config
    meta = {
        "itos": tok.base.itos,  # the plays' characters; the chat tokens follow them
        "specials": specials(tok.base),
        "chat": {
            "tokens": list(chat.SPECIAL_TOKENS),
            "user": tok.user_id,
            "assistant": tok.assistant_id,
            "end": tok.end_id,
        },
        "max_len": cfg.max_len,
        "max_answer": chat.MAX_ANSWER,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "kv_heads": attn.num_kv_heads,  # the past's shape, (layers, 1, kv_heads, T_past, head_width)
        "head_width": attn.d_k,
        "gap": gap,
        "graph_bytes": graph_bytes,
        "file": path.name,
        "int8": int8,
    }
    return path, meta


def build(models: Path) -> tuple[dict[str, dict], dict]:
    """Write the three models' step files into `models`; -> ({key: its meta}, PyTorch's answers on LINES)."""
    tok = chat.chat_tokenizer()
    _, held_out = chat.task_words()
    drawn = chat.random_instructions(AGREEMENT - len(LINES), held_out, random.Random(0))
    trial_lines = [*LINES, *drawn]  # the browser tests' lines, then seeded task lines on words never trained on
    metas, answers = {}, {}
    for key, load in MODELS.items():
        model = load().eval()
        if (model.config.vocab_size, model.config.max_len) != (tok.vocab_size, MAX_LEN):
            raise SystemExit(f"{key}: {model.config.vocab_size} ids and {model.config.max_len} positions, expected "
                             f"the chat tokenizer's {tok.vocab_size} and {MAX_LEN}")  # fmt: skip
        answers[key] = _answers(key, model, tok)
        _, metas[key] = _export(key, model, tok, models, trial_lines)
    lines = [
        {
            "line": line,
            "prompt": tok.encode_chat(line)[0],
            "right": _right(line),
            "answers": {key: answers[key][line] for key in MODELS},
        }
        for line in LINES
    ]
    return metas, {"examples": EXAMPLES, "longest": LONGEST, "lines": lines}
