// Fill in the blank: chapter 15's BERT guesses the word hidden behind the blank in the reader's line.
//
// The model (models/plays_bert.onnx) is tl.bert.BertForMaskedLM, 4 layers, 4 heads, 64 positions, pre-trained on ten
// plays by the plays_bert recipe and exported by transformer_lib.export.export_onnx:
//   tokens (1, S) = [CLS] words [SEP], one of them [MASK] -> logits (1, S, V), attention (L, h, S, S)
// The page splits the line into words as transformer_lib.pretraining.PlayWords does: the blank (___ or [MASK]) is
// found first, then each side is lowercased and cut with PlayWords' own pattern, and a word outside the vocabulary is
// [UNK]. Both patterns come from meta.json (word_pattern, blank_pattern), where tools/playground_build/fill_blank.py
// writes them, and the ids of the specials too. The five likeliest words are the softmax of the logits at [MASK];
// the attention shown is the [MASK] row of the chosen layer's weights, one head's or the mean of the heads.

import {
  cell, clearResult, fillDefaults, fillSelect, firstAnswer, guarded, idsTensor, listed, loadModel, plural, quoted, rows,
  showError, softmax, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);

let vocabulary = null; // word -> id, made once from meta.json's itos

// The reader's line -> {ids, tokens, unknown, blank} or {error: what was expected and what came}.
// ids are [CLS], the words before the blank, [MASK], the words after, [SEP]; blank is the position of [MASK].
function check(text, info) {
  const example = "for example “Give me your hand, my good ___.”";
  if (text.trim() === "") {
    return { error: `The line is empty: type a line with one blank, written ___ (three underscores) or [MASK], ${example}` };
  }
  const blanks = text.match(new RegExp(info.blank_pattern, "giu")) ?? [];
  if (blanks.length === 0) {
    const under = text.match(/_+/u);
    return { error: "The line has no blank: write ___ (three underscores) or [MASK] where the hidden word goes" +
      (under ? `; “${under[0]}” has ${plural(under[0].length, "underscore")}, and a blank needs three.` : ".") };
  }
  if (blanks.length > 1) {
    return { error: `The line has ${blanks.length} blanks (${listed(blanks.map((b) => `“${b}”`))}); the model fills ` +
      "one at a time. Keep one and write words in place of the others." };
  }
  const word = new RegExp(info.word_pattern, "gu");
  const [before, after] = text.split(new RegExp(info.blank_pattern, "iu")).map((piece) => piece.toLowerCase().match(word) ?? []);
  const around = [...before, ...after];
  if (around.length === 0) {
    return { error: "The line is only the blank: the model guesses from the words around it, so give it some, " +
      "for example “my good ___”." };
  }
  if (!around.some((w) => /^'?[a-z]/u.test(w))) { // a word, not a mark (a lone apostrophe is a mark)
    return { error: `Besides the blank the line has only ${listed(around.map(quoted))}: the model guesses from the ` +
      "words around the blank, so give it some." };
  }
  const most = info.max_len - 2; // [CLS] and [SEP] take two of the model's positions
  if (around.length + 1 > most) {
    return { error: `The line has ${around.length + 1} words and marks with the blank, more than the ${most} the model ` +
      `reads (its ${info.max_len} positions hold [CLS] and [SEP] too). Shorten it by ${around.length + 1 - most}.` };
  }
  vocabulary ??= new Map(info.itos.map((w, i) => [w, i]));
  const id = (w) => vocabulary.get(w) ?? info.specials.unk;
  const ids = [info.specials.cls, ...before.map(id), info.specials.mask, ...after.map(id), info.specials.sep];
  const unknown = [...new Set(around.filter((w) => !vocabulary.has(w)))];
  return { ids, tokens: ids.map((i) => info.itos[i]), unknown, blank: before.length + 1 };
}

// Probabilities (V) -> the indices of the `k` largest, largest first (the smaller index first on a tie)
function topIndices(p, k) {
  return Array.from(p.keys()).sort((i, j) => p[j] - p[i] || i - j).slice(0, k);
}

// The table of the likeliest words: rank, word, probability and a bar as long as the probability
function showTop(top, p, info) {
  $("fill-top").tBodies[0].replaceChildren(...top.map((i, k) => {
    const tr = cell("tr", "", { "data-token": info.itos[i], "data-p": String(p[i]) });
    const bar = cell("div", "", { class: "playground-bar fill-bar", "aria-hidden": "true" });
    const fill = cell("div");
    fill.style.width = `${(100 * p[i]).toFixed(1)}%`;
    bar.append(fill);
    const barCell = cell("td");
    barCell.append(bar);
    tr.append(cell("td", String(k + 1)), cell("th", info.itos[i], { scope: "row" }), cell("td", p[i].toFixed(4)), barCell);
    return tr;
  }));
}

// The line as the model read it, the first guess in the blank: [CLS] and [SEP] left out
function showFilled(s, word) {
  const line = $("fill-filled");
  line.replaceChildren();
  s.tokens.slice(1, -1).forEach((token, k) => {
    if (k > 0) line.append(" ");
    line.append(k + 1 === s.blank ? cell("mark", word) : token);
  });
}

// The attention from the blank, over every token the model reads, for the chosen layer and head (or the mean of the
// heads): one shaded token each, darker for more weight (relative to the largest), with its weight written under it
function drawAttention() {
  if (answer === null) return;
  const { out, s } = answer;
  const [, h] = out.attention.dims;
  const layer = Number($("fill-layer").value), head = $("fill-head").value;
  const heads = head === "mean" ? Array.from({ length: h }, (_, k) => k) : [Number(head)];
  const from = heads.map((k) => rows(out.attention, layer, k)[s.blank]); // the blank's row (S,) of each head
  const weights = s.tokens.map((_, c) => from.reduce((sum, row) => sum + row[c], 0) / from.length); // (S,)
  const largest = Math.max(...weights);
  const which = head === "mean" ? `the mean of the ${h} heads` : `head ${Number(head) + 1}`;
  const list = $("fill-attention");
  list.setAttribute("aria-label", `Attention from the blank in layer ${layer + 1}, ${which}, over the ` +
    `${s.tokens.length} tokens the model reads; each token is followed by its weight`);
  list.replaceChildren(...s.tokens.map((token, k) => {
    const w = weights[k];
    const item = cell("li", "", { class: k === s.blank ? "fill-token fill-query" : "fill-token", "data-token": token,
      "data-w": String(w), title: `${token}: ${w.toFixed(4)}${k === s.blank ? " (the blank itself)" : ""}` });
    item.style.background = `hsl(215, 75%, ${(97 - 37 * (largest > 0 ? w / largest : 0)).toFixed(1)}%)`;
    item.append(cell("span", token, { class: "fill-word" }), " ", cell("span", w.toFixed(2), { class: "fill-weight" }));
    return item;
  }));
  const most = weights.reduce((best, w, k) => (w > weights[best] ? k : best), 0);
  $("fill-attention-note").textContent = `Layer ${layer + 1}, ${which}: the blank puts the most weight, ` +
    `${weights[most].toFixed(2)}, on “${s.tokens[most]}”${most === s.blank ? " (itself)" : ""}.`;
  return { most, weight: weights[most], which, layer };
}

let model = null;
let latest = 0; // the newest request: an answer that arrives after a newer request is dropped
let answer = null; // the last answer shown: {out, s}, redrawn when the layer or head changes

async function fill() {
  if (model === null) return;
  const { ort, session, info } = model;
  const request = ++latest; // taken first, so that a bad input also cancels an answer still on its way
  const s = check($("fill-text").value, info);
  if (showError($("fill-error"), $("fill-text"), s.error)) {
    answer = null; // the previous line's answer goes, its summary in the live region too: the alert says what is wrong
    clearResult($("fill-top").tBodies[0], $("fill-filled"), $("fill-unknown"), $("fill-attention"), $("fill-attention-note"),
      $("fill-status"));
    return;
  }
  const start = performance.now();
  const out = await session.run({ tokens: idsTensor(ort, s.ids) }); // logits (1, S, V), attention (L, h, S, S)
  if (request !== latest) return;
  firstAnswer("fill_blank", start);
  const p = softmax(rows(out.logits, 0)[s.blank]); // (V,): the probabilities at the blank
  const top = topIndices(p, info.top);
  answer = { out, s };
  showTop(top, p, info);
  showFilled(s, info.itos[top[0]]);
  const unknown = s.unknown.length === 0 ? "" : `Not in the model's vocabulary, so it reads [UNK] in their place: ` +
    `${listed(s.unknown.map(quoted))}.`;
  $("fill-unknown").textContent = unknown;
  const seen = drawAttention();
  const guesses = top.map((i) => `“${info.itos[i]}” ${p[i].toFixed(3)}`).join(", ");
  $("fill-status").textContent = `${s.tokens.length} tokens read. The likeliest words in the blank: ${guesses}. ` +
    (unknown ? `${unknown} ` : "") + `Attention from the blank in layer ${seen.layer + 1}, ${seen.which}: ` +
    `most on “${s.tokens[seen.most]}” (${seen.weight.toFixed(2)}).`;
}

const run = () => guarded("fill blank: filling in the blank", $("fill-status"), fill);

async function main() {
  await fillDefaults("fill_blank"); // the form's starting value, which the build's answers are for
  model = await loadModel("fill_blank", $("fill-status"));
  const { layers, heads } = model.info;
  fillSelect($("fill-layer"), layers, layers - 1);
  fillSelect($("fill-head"), heads, 0, "mean of the heads");
  $("fill-head").value = "mean";
  const redraw = () => guarded("fill blank: drawing the attention", $("fill-status"), async () => { drawAttention(); });
  $("fill-layer").addEventListener("change", redraw);
  $("fill-head").addEventListener("change", redraw);
  $("fill-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

startPage("fill blank", $("fill-status"), main);
