// Brackets: the book's encoder classifier says whether the reader's bracket string is balanced.
//
// The model (models/bracket_classifier.onnx) is tl.EncoderClassifier, 3 layers, 8 heads:
//   tokens (1, S) = <bos> then the brackets -> logits (1, 2), attention (L, h, S, S)
// P(balanced) is the softmax of the two logits. The page opens on the head that, on held-out
// strings, puts the most weight on each bracket's partner (tools/playground_build/brackets.py measures it).

import {
  clearResult, fillDefaults, fillSelect, firstAnswer, guarded, heatmap, idsTensor, loadModel, rows, showError, shown,
  softmax, startPage,
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

let model = null;
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
  model = await loadModel("bracket_classifier", $("brackets-status"));
  const { layers, heads, partner } = model.info;
  fillSelect($("brackets-layer"), layers, partner.layer);
  fillSelect($("brackets-head"), heads, partner.head);
  $("brackets-partner").textContent = `layer ${partner.layer + 1}, head ${partner.head + 1}`;
  $("brackets-text").addEventListener("input", run);
  $("brackets-layer").addEventListener("change", run);
  $("brackets-head").addEventListener("change", run);
  $("brackets-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

startPage("brackets", $("brackets-status"), main);
