// Inside the language model: the Shakespeare character model's logit lens and attention on the reader's text.
//
// The model (models/shakespeare_char_lens.onnx) is tl.DecoderOnlyLM, 4 layers, 4 heads, 128 positions, exported
// as transformer_lib.export.lens_model:
//   tokens (1, T) -> lens (L, T, V), attention (L, h, T, T)
// lens[l] is layer l's residual stream read through the final norm and the output layer: logits, as
// tl.inside.logit_lens gives them (its last row is the model's own logits). The page takes their softmax and
// shows the three likeliest next characters at each position for each layer. attention[l] is layer l's
// attention weights, one (T, T) map per head, from which the page computes each head's induction score
// exactly as tl.inside.induction_scores does.
//
// "Break it, and watch" runs a second file, models/shakespeare_char_ablation.onnx: the same model as one graph whose
// inputs are switches (transformer_lib.export.ablation_model):
//   tokens (1, T), heads (L, h), layers (L,), positions (1,), norms (2L + 1,), int64 -> logits (1, T, V)
// heads and layers: 0 on, 1 zeroed, 2 replaced by the mean output (over 64 windows of the validation text);
// positions and norms (each layer's attention and feed-forward norm, then the final norm): 1 on, 0 off. These are
// tl.inside's zero_heads, mean_heads, zero_output, mean_output, without_positions and skip_norms, number for number.
// The page computes the bits per character on a fixed passage and writes greedily after the reader's text, running
// the whole text at each step (the switches change every position, so no cache is kept).

import {
  argmax, cell, clearResult, fillDefaults, fillSelect, firstAnswer, generator, guarded, heatmap, idsTensor, loadModel,
  rows, showError, shown, softmax, startPage, unknownCharacters,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const MAX_SEED = 4294967295; // mulberry32 takes a 32-bit seed

// The reader's text -> {text, ids} or {error: what is wrong}
function check(text, info) {
  if (text === "") return { error: "The text is empty: type a few characters, for example a line of verse." };
  const unknown = unknownCharacters(text, info.itos, info.specials);
  if (unknown.length) {
    return { error: `The model has never seen ${unknown.join(", ")}: its vocabulary is the characters of the ` +
      "training plays. Remove or replace them." };
  }
  const T = [...text].length;
  if (T > info.max_len) {
    return { error: `The text has ${T} characters, more than the model's ${info.max_len} positions. Shorten it.` };
  }
  return { text, ids: [...text].map((c) => info.itos.indexOf(c)) };
}

// The seed field -> its value, or null when it is not a whole number from 0 to MAX_SEED
function seedValue() {
  const text = $("inside-seed").value.trim();
  const n = Number(text);
  return text !== "" && Number.isInteger(n) && n >= 0 && n <= MAX_SEED ? n : null;
}

// `block` characters of the vocabulary (no special token) drawn with the seeded generator, shown twice.
// tools/playground_build/inside.py's repeated_random draws the same string for the same seed.
function repeatedRandom(info, seed, block) {
  const chars = info.itos.slice(info.specials.count);
  const random = generator(seed);
  const once = Array.from({ length: block }, () => chars[Math.floor(random() * chars.length)]).join("");
  return once + once;
}

// ids (T) -> for each position t, the keys an induction head would attend to: s in 1..t with ids[s - 1] === ids[t]
// (the key just after an earlier copy of this token), as tl.inside.induction_scores defines them
function inductionTargets(ids) {
  return ids.map((id, t) => {
    const keys = [];
    for (let s = 1; s <= t; s++) if (ids[s - 1] === id) keys.push(s);
    return keys;
  });
}

// One head's weights (T rows of T) and the targets -> the attention on the targets, summed, averaged over the
// positions that have a target (tl.inside.induction_scores)
function inductionScore(weights, targets) {
  let total = 0, counted = 0;
  targets.forEach((keys, t) => {
    if (keys.length === 0) return;
    total += keys.reduce((sum, s) => sum + weights[t][s], 0);
    counted += 1;
  });
  return total / counted;
}

// The score that even attention would get (each position spreading its weight alike over the t + 1 keys it sees)
function evenScore(targets) {
  const counted = targets.map((keys, t) => [keys.length, t]).filter(([n]) => n > 0);
  return counted.reduce((sum, [n, t]) => sum + n / (t + 1), 0) / counted.length;
}

// A probability as the table writes it: a whole percentage, or "<1%"
const percent = (p) => (p < 0.005 ? "<1%" : `${Math.round(100 * p)}%`);

// The logit lens's table: one row per position, one column per layer, the `top` likeliest next tokens in each
// cell, the text's own next character marked. -> per layer, how often that next character is first and in the top.
function lensTable(out, s, info) {
  const [L, T] = out.lens.dims;
  const text = [...s.text];
  const head = $("inside-lens").tHead.rows[0];
  head.replaceChildren(cell("th", "position", { scope: "col" }), cell("th", "character", { scope: "col" }),
    cell("th", "next", { scope: "col" }),
    ...Array.from({ length: L }, (_, l) => cell("th", `layer ${l + 1}`, { scope: "col" })));
  const first = new Array(L).fill(0), inTop = new Array(L).fill(0);
  const lenses = Array.from({ length: L }, (_, l) => rows(out.lens, l)); // L of T rows of V logits
  const body = text.map((c, t) => {
    const next = t + 1 < T ? text[t + 1] : null;
    const tr = cell("tr");
    tr.append(cell("td", String(t + 1)), cell("th", shown(c), { scope: "row" }), cell("td", next === null ? "—" : shown(next)));
    for (let l = 0; l < L; l++) {
      const p = softmax(lenses[l][t]); // (V,)
      const top = p.map((_, i) => i).sort((i, j) => p[j] - p[i]).slice(0, info.top); // likeliest first
      const td = cell("td", "", { class: "inside-candidates" });
      top.forEach((i, k) => {
        const token = info.itos[i];
        const right = token === next;
        const span = cell(right ? "mark" : "span", `${shown(token)} ${percent(p[i])}`,
          { class: "inside-candidate", "data-token": token, "data-p": String(p[i]),
            title: `${shown(token)}: ${p[i].toFixed(4)}${right ? ", the text's next character" : ""}` });
        td.append(span);
        if (right) {
          inTop[l] += 1;
          if (k === 0) first[l] += 1;
        }
      });
      tr.append(td);
    }
    return tr;
  });
  $("inside-lens").tBodies[0].replaceChildren(...body);
  const foot = (label, counts) => {
    const tr = cell("tr");
    tr.append(cell("th", label, { scope: "row", colspan: "3" }), ...counts.map((n) => cell("td", `${n} of ${T - 1}`)));
    return tr;
  };
  $("inside-lens").tFoot.replaceChildren(foot("next character ranked first", first),
    foot(`next character in the top ${info.top}`, inTop));
  return { first, inTop };
}

// Every head's induction score, one row per layer; the largest is marked. -> {scores (L of h), best, even} or null
// when no character repeats an earlier one (no score exists)
function inductionTable(out, s) {
  const [L, h, T] = out.attention.dims;
  const targets = inductionTargets(s.ids);
  const table = $("inside-induction");
  table.tHead.rows[0].replaceChildren(cell("td"),
    ...Array.from({ length: h }, (_, k) => cell("th", `head ${k + 1}`, { scope: "col" })));
  if (!targets.some((keys) => keys.length > 0)) {
    table.tBodies[0].replaceChildren();
    table.hidden = true;
    $("inside-induction-note").textContent = `None of your ${T} characters repeats an earlier one, so there is nothing ` +
      "for an induction head to find and no score exists. Type a text with a repeat, or press “Repeated random string”.";
    return null;
  }
  const scores = Array.from({ length: L }, (_, l) => Array.from({ length: h },
    (_, k) => inductionScore(rows(out.attention, l, k), targets)));
  let best = [0, 0];
  scores.forEach((row, l) => row.forEach((x, k) => { if (x > scores[best[0]][best[1]]) best = [l, k]; }));
  table.tBodies[0].replaceChildren(...scores.map((row, l) => {
    const tr = cell("tr");
    tr.append(cell("th", `layer ${l + 1}`, { scope: "row" }), ...row.map((x, k) => {
      const isBest = l === best[0] && k === best[1];
      return cell("td", x.toFixed(3), { "data-score": String(x), ...(isBest && { class: "inside-best" }) });
    }));
    return tr;
  }));
  table.hidden = false;
  const even = evenScore(targets);
  const counted = targets.filter((keys) => keys.length > 0).length;
  $("inside-induction-note").textContent = `${counted} of your ${T} positions repeat an earlier character. ` +
    `A head that spread its attention evenly over the keys it sees would score ${even.toFixed(3)} here; ` +
    "an induction head scores far above that, up to 1. The highest score is underlined.";
  return { scores, best, even };
}

// The chosen head's attention, with the induction targets outlined
function drawAttention(out, s, info) {
  const layer = Number($("inside-layer").value), head = Number($("inside-head").value);
  const targets = inductionTargets(s.ids);
  const labels = s.ids.map((i) => shown(info.itos[i]));
  heatmap($("inside-map"), rows(out.attention, layer, head), labels, labels, {
    label: `Attention weights of layer ${layer + 1}, head ${head + 1} on ${labels.length} characters: queries (rows) ` +
      "against keys (columns); outlined cells are where an induction head would look",
    rowTitle: "query", colTitle: "key", outlined: (r, c) => targets[r].includes(c) });
}

// ---- Break it, and watch ----

const SWITCH_CHOICES = [["on", "0"], ["zeroed", "1"], ["its mean", "2"]];

// A switch and its label: in the table the row and column say what it is, so the label is read, not shown
function switchSelect(id, label) {
  const select = cell("select", "", { id, class: "inside-switch" });
  for (const [text, code] of SWITCH_CHOICES) select.append(new Option(text, code, code === "0", code === "0"));
  const span = cell("span");
  span.append(cell("label", label, { for: id, class: "playground-unseen" }), select);
  return span;
}

function switchBox(id, label, shownLabel = false) {
  const box = cell("input", "", { id, type: "checkbox" });
  box.checked = box.defaultChecked = true;
  const span = cell("span", "", { class: shownLabel ? "playground-field" : "" });
  span.append(box, cell("label", label, { for: id, ...(shownLabel ? {} : { class: "playground-unseen" }) }));
  return span;
}

// The switches' table: one row per layer (the whole layer, each head, its two norms), then the positions and the
// final norm
function buildSwitches(L, h) {
  const head = $("inside-switches").tHead.rows[0];
  head.replaceChildren(cell("td"), cell("th", "whole layer", { scope: "col" }),
    ...Array.from({ length: h }, (_, k) => cell("th", `head ${k + 1}`, { scope: "col" })),
    cell("th", "attention norm", { scope: "col" }), cell("th", "feed-forward norm", { scope: "col" }));
  $("inside-switches").tBodies[0].replaceChildren(...Array.from({ length: L }, (_, l) => {
    const tr = cell("tr");
    const td = (node) => { const c = cell("td"); c.append(node); return c; };
    tr.append(cell("th", `layer ${l + 1}`, { scope: "row" }), td(switchSelect(`inside-layer-${l}`, `Layer ${l + 1}, whole layer`)),
      ...Array.from({ length: h }, (_, k) => td(switchSelect(`inside-head-${l}-${k}`, `Layer ${l + 1}, head ${k + 1}`))),
      td(switchBox(`inside-norm-${2 * l}`, `Layer ${l + 1}, attention norm`)),
      td(switchBox(`inside-norm-${2 * l + 1}`, `Layer ${l + 1}, feed-forward norm`)));
    return tr;
  }));
  $("inside-global-switches").replaceChildren(switchBox("inside-positions", "Positions", true),
    switchBox(`inside-norm-${2 * L}`, "Final norm", true));
}

// The switches as the graph's inputs ([heads (L of h), layers (L), positions (1), norms (2L + 1)], numbers) and in
// words: what is off
function switchValues(L, h) {
  const code = (id) => Number($(id).value);
  const on = (id) => ($(id).checked ? 1 : 0);
  const heads = Array.from({ length: L }, (_, l) => Array.from({ length: h }, (_, k) => code(`inside-head-${l}-${k}`)));
  const layers = Array.from({ length: L }, (_, l) => code(`inside-layer-${l}`));
  const norms = Array.from({ length: 2 * L + 1 }, (_, i) => on(`inside-norm-${i}`));
  const how = ["", "zeroed", "by its mean"];
  const off = [];
  layers.forEach((c, l) => { if (c) off.push(`layer ${l + 1} ${how[c]}`); });
  heads.forEach((row, l) => row.forEach((c, k) => { if (c) off.push(`layer ${l + 1} head ${k + 1} ${how[c]}`); }));
  if (!on("inside-positions")) off.push("the positions");
  norms.forEach((n, i) => {
    if (!n) off.push(i === 2 * L ? "the final norm" : `layer ${Math.floor(i / 2) + 1}'s ${i % 2 ? "feed-forward" : "attention"} norm`);
  });
  return { inputs: [heads, layers, [on("inside-positions")], norms], off };
}

const int64 = (ort, values, dims) => new ort.Tensor("int64", BigInt64Array.from(values, BigInt), dims);

// ids (T) and the switches -> logits (1, T, V) of the model as switched
async function runSwitched(ids, inputs) {
  const { ort, session } = broken;
  const [heads, layers, positions, norms] = inputs;
  const out = await session.run({ tokens: idsTensor(ort, ids), heads: int64(ort, heads.flat(), [heads.length, heads[0].length]),
    layers: int64(ort, layers, [layers.length]), positions: int64(ort, positions, [1]), norms: int64(ort, norms, [norms.length]) });
  return out.logits;
}

// logits (1, T, V) over a passage of ids (T) -> the mean of -log2 p(next character) over its T - 1 positions
function bitsPerCharacter(logits, ids) {
  const V = logits.dims[2];
  let total = 0;
  for (let t = 0; t + 1 < ids.length; t++) {
    const row = logits.data.subarray(t * V, (t + 1) * V);
    const top = Math.max(...row);
    const logSum = top + Math.log(row.reduce((sum, x) => sum + Math.exp(x - top), 0));
    total += (logSum - row[ids[t + 1]]) / Math.LN2;
  }
  return total / (ids.length - 1);
}

let broken = null; // the switchable model: {ort, session, info}
let whole = null; // the whole model's bits per character on the passage
let breakLatest = 0; // the newest request: an answer that arrives after a newer one is dropped

async function breakIt() {
  if (broken === null || model === null) return;
  const request = ++breakLatest;
  const start = performance.now();
  const { layers: L, heads: h, itos } = model.info;
  const { inputs, off } = switchValues(L, h);
  const passage = [...broken.info.passage].map((c) => itos.indexOf(c));
  const bpc = bitsPerCharacter(await runSwitched(passage, inputs), passage);
  if (request !== breakLatest) return;
  const s = check($("inside-text").value, model.info);
  let written = "";
  if (!s.error) {
    const ids = s.ids.slice();
    const n = Math.min(broken.info.new, model.info.max_len - ids.length);
    for (let i = 0; i < n; i++) {
      const logits = await runSwitched(ids, inputs); // (1, T, V): the whole text, as the switches change every position
      if (request !== breakLatest) return;
      const V = logits.dims[2];
      ids.push(argmax(logits.data.subarray((ids.length - 1) * V, ids.length * V)));
    }
    written = ids.slice(s.ids.length).map((i) => itos[i]).join("");
  }
  $("inside-break-prompt").textContent = s.error ? "" : s.text;
  $("inside-break-written").textContent = written;
  const status = $("inside-break-status");
  status.dataset.bpc = String(bpc);
  status.dataset.switches = JSON.stringify(inputs);
  firstAnswer("inside_ablation", start);
  status.textContent = `Bits per character on the passage: ${bpc.toFixed(3)}` +
    (whole === null || off.length === 0 ? " (the whole model)" : ` (the whole model: ${whole.toFixed(3)}; ` +
      `${bpc >= whole ? "+" : "−"}${Math.abs(bpc - whole).toFixed(3)})`) +
    `. Switched off: ${off.length ? off.join(", ") : "nothing"}. ` +
    (s.error ? "No text written: the text above has a problem." : `Greedy, ${written.length} characters after your ` +
      `text: “${written}”.`);
}

const breakRun = () => guarded("inside: breaking the model", $("inside-break-status"), breakIt);

let model = null;
let latest = 0; // the newest request: an answer that arrives after a newer request is dropped
let answer = null; // the last answer shown: {out, s}, redrawn when the layer or head changes

async function look() {
  if (model === null) return;
  const { ort, session, info } = model;
  const request = ++latest; // taken first, so that a bad input also cancels an answer still on its way
  const s = check($("inside-text").value, info);
  if (showError($("inside-error"), $("inside-text"), s.error)) {
    answer = null;
    clearResult($("inside-lens").tBodies[0], $("inside-lens").tFoot, $("inside-induction").tBodies[0], $("inside-map"),
      $("inside-induction-note"));
    $("inside-induction").hidden = true;
    return;
  }
  const start = performance.now();
  const out = await session.run({ tokens: idsTensor(ort, s.ids) }); // lens (L, T, V), attention (L, h, T, T)
  if (request !== latest) return;
  answer = { out, s };
  const { first } = lensTable(out, s, info);
  const induction = inductionTable(out, s);
  drawAttention(out, s, info);
  firstAnswer("inside", start);
  const T = s.ids.length;
  const heads = induction === null ? "No character repeats, so no head has an induction score."
    : `The highest induction score is ${induction.scores[induction.best[0]][induction.best[1]].toFixed(3)} ` +
      `(layer ${induction.best[0] + 1}, head ${induction.best[1] + 1}); even attention would score ` +
      `${induction.even.toFixed(3)}.`;
  const ranked = first.map((n, l) => `layer ${l + 1} at ${n}`).join(", ");
  $("inside-status").textContent = `${$("inside-source").textContent}Looked inside ${T} characters. The text's ` +
    `next character comes first, of ${T - 1} positions, in ${ranked}. ${heads}`;
}

const run = () => guarded("inside: looking inside", $("inside-status"), look);

async function onRandom() {
  const seed = seedValue();
  $("inside-text").setAttribute("aria-invalid", "false");
  if (showError($("inside-error"), $("inside-seed"),
    seed === null ? `The seed must be a whole number from 0 to ${MAX_SEED}, got “${$("inside-seed").value}”.` : null)) {
    return;
  }
  const block = model.info.random_block;
  $("inside-text").value = repeatedRandom(model.info, seed, block);
  $("inside-source").textContent = `A random string of ${block} characters (seed ${seed}), shown twice. `;
  await run();
  await breakRun();
}

async function main() {
  await fillDefaults("inside"); // the form's starting values, which the build's answers are for
  model = await loadModel("inside", $("inside-status"));
  const { layers, heads } = model.info;
  fillSelect($("inside-layer"), layers, 0);
  fillSelect($("inside-head"), heads, 0);
  const redraw = () => guarded("inside: drawing the attention", $("inside-status"), async () => {
    if (answer !== null) drawAttention(answer.out, answer.s, model.info);
  });
  $("inside-layer").addEventListener("change", redraw);
  $("inside-head").addEventListener("change", redraw);
  $("inside-text").addEventListener("input", () => {
    $("inside-source").textContent = ""; // the reader's own text now
    $("inside-seed").setAttribute("aria-invalid", "false");
    run();
    breakRun();
  });
  $("inside-random").addEventListener("click", () => guarded("inside: drawing a random string", $("inside-status"), onRandom));
  $("inside-form").addEventListener("submit", (e) => { e.preventDefault(); run(); breakRun(); });
  await run();
  buildSwitches(layers, heads);
  $("inside-break-form").addEventListener("change", breakRun);
  $("inside-break-form").addEventListener("submit", (e) => { e.preventDefault(); breakRun(); });
  $("inside-break-reset").addEventListener("click", () => { $("inside-break-form").reset(); breakRun(); });
  broken = await loadModel("inside_ablation", $("inside-break-status"));
  await guarded("inside: breaking the model", $("inside-break-status"), async () => {
    $("inside-break-passage").textContent = broken.info.passage;
    const passage = [...broken.info.passage].map((c) => model.info.itos.indexOf(c));
    const allOn = [Array.from({ length: layers }, () => new Array(heads).fill(0)), new Array(layers).fill(0), [1],
      new Array(2 * layers + 1).fill(1)]; // whatever the switches show by now: the whole model's figure
    whole = bitsPerCharacter(await runSwitched(passage, allOn), passage);
    await breakIt();
  });
}

startPage("inside", $("inside-status"), main);
