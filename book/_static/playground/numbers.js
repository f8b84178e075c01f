// Numbers to words: the book's encoder-decoder translates a number the reader types, one word at a time.
//
// The model (models/numbers_to_words.int8.onnx, its weights in int8; meta.json names the file) is
// tl.Transformer with 2 + 2 layers and 4 heads:
//   src (1, S = 5) digit ids, tgt (1, T) word ids so far -> logits (1, T, V), cross_attention (L, h, T, S)
// Greedy decoding runs here as in Transformer.greedy_decode: start from <bos>, append the likeliest
// word, stop at <eos>. The ONNX file has no cache, so each step runs the whole decoder again.

import {
  argmax, clearResult, fillDefaults, fillSelect, firstAnswer, guarded, heatmap, idsTensor, loadModel, meanRows,
  painted, rows, showError, shown, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const PLACES = ["ten thousands", "thousands", "hundreds", "tens", "ones"];

// The reader's text -> {digits: the 5 characters the encoder reads} or {error: what is wrong, in words}
function check(text, info) {
  const t = text.trim().replaceAll(",", ""); // "4,021" is 4021
  const range = `the model knows whole numbers from 0 to ${info.max_number.toLocaleString("en")}`;
  if (t === "") return { error: `The field is empty: ${range}.` };
  if (/^-\d+$/.test(t)) return { error: `${t} is out of range: ${range}.` };
  const bad = [...new Set(t.replace(/[0-9]/g, ""))].map((c) => `“${shown(c)}”`);
  if (bad.length) {
    return { error: `The model reads only the digits 0 to 9; ${bad.join(", ")} ${bad.length > 1 ? "are" : "is"} not ` +
      "in its vocabulary." };
  }
  if (Number(t) > info.max_number) return { error: `${t} is out of range: ${range}.` };
  return { digits: String(Number(t)).padStart(info.width, "0") };
}

// Word tokens -> text as WordTokenizer.join writes it: spaces between words, none after a hyphen
function join(words) {
  return words.reduce((text, w) => (text === "" || text.endsWith("-") ? text + w : `${text} ${w}`), "");
}

let model = null; // {ort, session, info}
let busy = false; // a translation is running: another press waits for it to finish
let answer = null; // the latest: {digits, words (predicted tokens, <eos> included), attention (L, h, T, S)}

function drawMap() {
  if (answer === null) return;
  const layer = Number($("numbers-layer").value), head = $("numbers-head").value;
  const [L, h] = answer.attention.dims;
  const maps = head === "mean" ? Array.from({ length: h }, (_, k) => rows(answer.attention, layer, k))
    : [rows(answer.attention, layer, Number(head))]; // each (T, S)
  const which = head === "mean" ? "the mean of its heads" : `head ${Number(head) + 1}`;
  heatmap($("numbers-map"), meanRows(maps), answer.words, [...answer.digits], {
    label: `Cross-attention of layer ${layer + 1} of ${L}, ${which}: each word written (rows) against the five ` +
      `digits of ${answer.digits} (columns)`, rowTitle: "writing", colTitle: "digit" });
}

function drawSource(digits, ids) {
  const table = $("numbers-source");
  table.querySelector("tbody").replaceChildren(...[["digit", [...digits]], ["token id", ids], ["place", PLACES]].map(
    ([name, cells]) => {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = name;
      tr.append(th, ...cells.map((c) => Object.assign(document.createElement("td"), { textContent: String(c) })));
      return tr;
    }));
  table.hidden = false;
}

async function translate() {
  const { ort, session, info } = model;
  const checked = check($("numbers-input").value, info);
  if (showError($("numbers-error"), $("numbers-input"), checked.error)) {
    answer = null; // the map and the words shown belonged to the previous number
    clearResult($("numbers-map"), $("numbers-output"));
    $("numbers-source").hidden = true;
    return;
  }
  const start = performance.now();
  const src = [...checked.digits].map((c) => info.src_itos.indexOf(c)); // (S,) digit ids
  drawSource(checked.digits, src);
  const { bos, eos, count } = info.tgt_specials; // the word tokenizer's <bos> and <eos> ids; ids below count are specials
  const tgt = [bos]; // (T,) word ids so far
  const words = []; // what each step predicted, for the map's rows
  $("numbers-output").textContent = "";
  for (let step = 0; step < info.max_new_tokens; step++) {
    const out = await session.run({ src: idsTensor(ort, src), tgt: idsTensor(ort, tgt) });
    const [, T, V] = out.logits.dims; // logits (1, T, V)
    const next = argmax(out.logits.data.subarray((T - 1) * V, T * V)); // the last position's likeliest word
    words.push(shown(info.tgt_itos[next]));
    answer = { digits: checked.digits, words, attention: out.cross_attention }; // (L, h, T, S)
    drawMap(); // one row more than the step before
    if (next === eos) break;
    tgt.push(next);
    $("numbers-output").textContent = join(tgt.slice(1).filter((i) => i >= count).map((i) => info.tgt_itos[i]));
    await painted();
  }
  firstAnswer("numbers_to_words", start);
  const text = $("numbers-output").textContent;
  $("numbers-status").textContent = `${checked.digits} in words: ${text || "(nothing: the model wrote <eos> first)"}.`;
}

async function onSubmit(event) {
  event?.preventDefault();
  if (model === null || busy) return;
  busy = true;
  await guarded("numbers: translating", $("numbers-status"), translate);
  busy = false;
}

async function main() {
  await fillDefaults("numbers"); // the form's starting values, which the build's answers are for
  model = await loadModel("numbers_to_words", $("numbers-status"));
  fillSelect($("numbers-layer"), model.info.layers, model.info.layers - 1);
  fillSelect($("numbers-head"), model.info.heads, 0, "all (mean)");
  $("numbers-head").value = "mean";
  const redraw = () => guarded("numbers: drawing the map", $("numbers-status"), async () => drawMap());
  $("numbers-layer").addEventListener("change", redraw);
  $("numbers-head").addEventListener("change", redraw);
  $("numbers-form").addEventListener("submit", onSubmit);
  await onSubmit();
}

startPage("numbers", $("numbers-status"), main);
