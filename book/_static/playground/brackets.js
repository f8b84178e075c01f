// Brackets: the book's encoder classifier says whether the reader's bracket string is balanced.
//
// The model (models/bracket_classifier.onnx) is tl.EncoderClassifier, 3 layers, 8 heads:
//   tokens (1, S) = <bos> then the brackets -> logits (1, 2), attention (L, h, S, S)
// P(balanced) is the softmax of the two logits. The page opens on the head that, on held-out
// strings, puts the most weight on each bracket's partner (tools/playground_build/brackets.py measures it).

import {
  clearResult, fillDefaults, fillSelect, firstAnswer, guarded, heatmap, idsTensor, loadModel, ownModelPicker, rows,
  showError, shown, softmax, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const OPEN = { ")": "(", "]": "[" };

// The reader's text -> {ids: <bos> and the brackets' ids} or {error: what is wrong}; <bos>'s id is in meta.json
function check(text, info) {
  if (text === "") return { error: "The field is empty: type brackets such as ([]())." };
  const bad = [...new Set(text)].filter((c) => !"()[]".includes(c)).map((c) => `“${shown(c)}”`);
  if (bad.length) return { error: `The model reads only ( ) [ ]; ${bad.join(", ")} ${bad.length > 1 ? "are" : "is"} not in its vocabulary.` };
  if (text.length + 1 > info.max_len) {
    return { error: `${text.length} brackets and <bos> make ${text.length + 1} tokens, more than the model's ` +
      `${info.max_len} positions.` };
  }
  return { ids: [info.specials.bos, ...[...text].map((c) => info.itos.indexOf(c))] };
}

// The rule itself, and each bracket's partner: text -> {balanced, partner: Map position -> position (1-based, after <bos>)}
function partners(text) {
  const stack = [], partner = new Map();
  let balanced = true;
  [...text].forEach((c, k) => {
    const i = k + 1;
    if (c === "(" || c === "[") stack.push([c, i]);
    else if (stack.length && stack[stack.length - 1][0] === OPEN[c]) {
      const [, j] = stack.pop();
      partner.set(i, j).set(j, i);
    } else balanced = false;
  });
  return { balanced: balanced && stack.length === 0, partner };
}

// The reader's own classifier: the head that puts the most weight on partners in the field's string, and that
// mean weight -> {layer, head, mean_weight}, or null when the string has no pair (or is not valid)
async function partnerOnString(loaded) {
  const text = $("brackets-text").value.replaceAll(" ", "");
  const checked = check(text, loaded.info);
  const pairs = checked.error ? [] : [...partners(text).partner];
  if (pairs.length === 0) return null;
  const out = await loaded.session.run({ tokens: idsTensor(loaded.ort, checked.ids) }); // attention (L, h, S, S)
  const [L, h] = out.attention.dims;
  let best = null;
  for (let l = 0; l < L; l++) {
    for (let k = 0; k < h; k++) {
      const weights = rows(out.attention, l, k);
      const mean = pairs.reduce((sum, [i, j]) => sum + weights[i][j], 0) / pairs.length;
      if (best === null || mean > best.mean_weight) best = { layer: l, head: k, mean_weight: mean };
    }
  }
  return best;
}

// Open the layer and head selects on `partner` (or on the first head when null) and say which head it is
function showPartner(info, partner, own) {
  fillSelect($("brackets-layer"), info.layers, partner?.layer ?? 0);
  fillSelect($("brackets-head"), info.heads, partner?.head ?? 0);
  $("brackets-partner").textContent = partner === null
    ? "none measured (the string in the field has no pair of brackets the model can read); layer 1, head 1 shown"
    : `layer ${partner.layer + 1}, head ${partner.head + 1}` + (own ? ` (for your model, on the string in the field: ` +
      `${partner.mean_weight.toFixed(2)} of a bracket's attention on its partner)` : "");
}

let model = null;
let bookModel = null;
let latest = 0;

async function classify() {
  if (model === null) return;
  const { ort, session, info } = model;
  const request = ++latest; // taken first, so that a bad input also cancels an answer still on its way
  const text = $("brackets-text").value.replaceAll(" ", "");
  const checked = check(text, info);
  if (showError($("brackets-error"), $("brackets-text"), checked.error)) {
    clearResult($("brackets-map"), $("brackets-probability"), $("brackets-verdict")); // the previous string's
    $("brackets-bar").style.width = "0";
    return;
  }
  const start = performance.now();
  const out = await session.run({ tokens: idsTensor(ort, checked.ids) }); // logits (1, 2), attention (L, h, S, S)
  if (request !== latest) return;
  firstAnswer("bracket_classifier", start);
  const p = softmax(out.logits.data)[1]; // P(balanced)
  const rule = partners(text);
  $("brackets-probability").textContent = p.toFixed(4);
  $("brackets-bar").style.width = `${(100 * p).toFixed(1)}%`;
  $("brackets-verdict").textContent = `The model says ${p >= 0.5 ? "balanced" : "not balanced"}; ` +
    `the rule says ${rule.balanced ? "balanced" : "not balanced"}.`;
  const layer = Number($("brackets-layer").value), head = Number($("brackets-head").value);
  const labels = [shown(info.itos[info.specials.bos]), ...text];
  heatmap($("brackets-map"), rows(out.attention, layer, head), labels, labels, {
    label: `Attention of layer ${layer + 1}, head ${head + 1} over ${text}: each bracket (rows) against every ` +
      "bracket (columns); each bracket's partner is outlined", rowTitle: "bracket", colTitle: "looks at",
    outlined: (r, c) => rule.partner.get(r) === c });
  $("brackets-status").textContent = `${text}: P(balanced) = ${p.toFixed(4)}. ${$("brackets-verdict").textContent}`;
}

const run = () => guarded("brackets: classifying", $("brackets-status"), classify);

async function main() {
  await fillDefaults("brackets"); // the form's starting values, which the build's answers are for
  ownModelPicker("brackets", "bracket_classifier", { // the reader's own classifier, read from disk
    onLoad: async (loaded) => {
      showPartner(loaded.info, await partnerOnString(loaded), true);
      model = loaded;
      await run();
    },
    onReset: async () => {
      model = bookModel;
      if (model !== null) {
        showPartner(model.info, model.info.partner, false);
        await run();
      }
    },
  });
  bookModel = await loadModel("bracket_classifier", $("brackets-status"));
  if (model === null) { // else the reader's own file came in while the book's model loaded: it stays
    model = bookModel;
    showPartner(model.info, model.info.partner, false);
  }
  $("brackets-text").addEventListener("input", run);
  $("brackets-layer").addEventListener("change", run);
  $("brackets-head").addEventListener("change", run);
  $("brackets-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

startPage("brackets", $("brackets-status"), main);
