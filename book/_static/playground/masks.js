// Masks and attention: the reader's characters, padding and masks go through the Shakespeare model's first layer.
//
// The probe (models/shakespeare_char_layer1.onnx, from transformer_lib.export.first_attention) is
// the language model's embedding, positions and first self-attention layer, with the mask as input:
//   tokens (1, T), mask (T, T) bool, true = may attend -> attention (h, T, T)
// The mask is built here from the two switches, as tl.padding_mask and tl.causal_mask would build
// it. A query row with nothing left to see gets all-zero weights, not NaN: the library's softmax
// zeroes fully masked rows, and the exported file keeps that.

import {
  clearResult, fillDefaults, fillSelect, firstAnswer, guarded, heatmap, idsTensor, loadModel, rows, showError, shown,
  startPage, unknownCharacters,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const MAX_PAD = 16;

// The reader's controls -> {ids, isPad, padding, causal}, or {error: what is wrong, field: where}
function settings(info) {
  const text = $("masks-text").value, padText = $("masks-pad").value.trim(), pads = Number(padText);
  if (text === "") return { field: "masks-text", error: "The text is empty: type a few characters, for example “to be”." };
  const unknown = unknownCharacters(text, info.itos, info.specials);
  if (unknown.length) {
    return { field: "masks-text", error: `${unknown.join(", ")} ${unknown.length > 1 ? "are" : "is"} not in the ` +
      "model's vocabulary (the characters of the training plays)." };
  }
  if (padText === "" || !Number.isInteger(pads) || pads < 0 || pads > MAX_PAD) {
    return { field: "masks-pad", error: `Pad tokens must be a whole number from 0 to ${MAX_PAD}, got “${padText}”.` };
  }
  if (text.length + pads > info.max_len) {
    return { field: "masks-text", error: `${text.length} characters and ${pads} pads make ${text.length + pads} ` +
      `tokens, more than the model's ${info.max_len} positions.` };
  }
  const ids = [...text].map((c) => info.itos.indexOf(c));
  const pad = info.specials.pad; // <pad>'s id
  const padding = new Array(pads).fill(pad);
  const all = $("masks-side").value === "left" ? [...padding, ...ids] : [...ids, ...padding]; // (T,)
  return { ids: all, isPad: all.map((i) => i === pad), padding: $("masks-padding").checked, causal: $("masks-causal").checked };
}

// (T,) pad flags and the switches -> the mask (T, T) as rows of booleans: query i may see key j
function buildMask(isPad, padding, causal) {
  return isPad.map((_, i) => isPad.map((keyIsPad, j) => !(padding && keyIsPad) && !(causal && j > i)));
}

let model = null;
let latest = 0; // the newest request: an answer that arrives after a newer request is dropped

async function recompute() {
  if (model === null) return;
  const { ort, session, info } = model;
  const request = ++latest; // taken first, so that a bad input also cancels an answer still on its way
  const s = settings(info);
  $("masks-text").setAttribute("aria-invalid", String(s.field === "masks-text"));
  if (showError($("masks-error"), $(s.field ?? "masks-pad"), s.error)) {
    clearResult($("masks-map")); // it belonged to the previous input
    return;
  }
  const start = performance.now();
  const T = s.ids.length;
  const mask = buildMask(s.isPad, s.padding, s.causal); // (T, T)
  const out = await session.run({ tokens: idsTensor(ort, s.ids),
    mask: new ort.Tensor("bool", Uint8Array.from(mask.flat(), Number), [T, T]) }); // attention (h, T, T)
  if (request !== latest) return;
  firstAnswer("masks", start);
  const head = Number($("masks-head").value);
  const weights = rows(out.attention, head); // (T, T)
  const labels = s.ids.map((i) => shown(info.itos[i]));
  heatmap($("masks-map"), weights, labels, labels, {
    label: `Attention weights of head ${head + 1} in the first layer, ${T} tokens: queries (rows) against keys ` +
      "(columns); masked cells are hatched", rowTitle: "query", colTitle: "key",
    masked: (r, c) => !mask[r][c] });
  const empty = mask.map((row, r) => (row.some(Boolean) ? null : r + 1)).filter((r) => r !== null); // 1-based rows
  const nan = out.attention.data.some(Number.isNaN); // over every head
  const emptyRowsAreZero = empty.every((r) => weights[r - 1].every((w) => w === 0));
  const rowsSaid = empty.length
    ? `Fully masked rows: ${empty.join(", ")}. Their weights are ${emptyRowsAreZero ? "all 0" : "NOT all 0"}, `
    : "No row is fully masked, ";
  $("masks-status").textContent = `Attention recomputed for ${T} tokens (padding mask ${s.padding ? "on" : "off"}, ` +
    `causal mask ${s.causal ? "on" : "off"}). ${rowsSaid}and ${nan ? "some weights are NaN" : "no weight is NaN"}.`;
}

const run = () => guarded("masks: recomputing the attention", $("masks-status"), recompute);

async function main() {
  await fillDefaults("masks"); // the form's starting values, which the build's answers are for
  model = await loadModel("masks", $("masks-status"));
  fillSelect($("masks-head"), model.info.heads, 0);
  for (const id of ["masks-text", "masks-pad", "masks-side", "masks-padding", "masks-causal", "masks-head"]) {
    $(id).addEventListener(id === "masks-text" || id === "masks-pad" ? "input" : "change", run);
  }
  $("masks-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

startPage("masks", $("masks-status"), main);
