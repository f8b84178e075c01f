// Language model: the book's Shakespeare character model continues the reader's prompt, one character at a time.
//
// The model (models/shakespeare_char_step.onnx) is tl.DecoderOnlyLM, 4 layers, 4 heads, 128 positions,
// exported with a KV cache (transformer_lib.export.step_model), which playground.js's CachedDecoder runs:
// the first call feeds the prompt with an empty past (T_past = 0); each later call feeds only the
// character just chosen, with the keys and values the call before returned, so a step computes one
// position instead of the whole text so far. The text is the same as without the cache (?cache=0 in
// the page's address feeds the whole text with an empty past at every step: benchmarks/playground.py
// compares the two). Each step samples from the last position's logits as DecoderOnlyLM.generate
// does: divide by the temperature (0 is greedy), keep the top-k likeliest, then the top-p nucleus,
// renormalise and draw, with a seeded generator (playground.js's mulberry32) so a seed repeats its text. Its
// numbers are not torch's: a seed repeats its text on this page, not the text of torch.manual_seed(seed) in Python.

import {
  argmax, CachedDecoder, fillDefaults, firstAnswer, generator, guarded, loadModel, ownModelPicker, painted, showError,
  shown, softmax, startPage, unknownCharacters,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const SHOWN_CANDIDATES = 8;
const USE_CACHE = new URLSearchParams(window.location.search).get("cache") !== "0"; // ?cache=0: without, to compare
const FRAME_MS = 16; // let the browser paint the text about once a frame: after every character, a step would
// take at least a frame (60 characters a second), however fast the model is

// A whole-number field -> its value, or null when it is empty or not a whole number at least `min`
function wholeNumber(id, min) {
  const text = $(id).value.trim();
  const n = Number(text);
  return text !== "" && Number.isInteger(n) && n >= min ? n : null;
}

// The reader's settings -> {prompt, n, temperature, topK, topP, seed}, or {error: what is wrong, field: where}
function settings(info) {
  const prompt = $("lm-prompt").value;
  const n = wholeNumber("lm-length", 1), topK = wholeNumber("lm-topk", 0), seed = wholeNumber("lm-seed", 0);
  const temperature = Number($("lm-temperature").value), topP = Number($("lm-topp").value); // sliders: always valid
  if (prompt === "") return { field: "lm-prompt", error: "The prompt is empty: type a few characters for the model to continue." };
  const unknown = unknownCharacters(prompt, info.itos, info.specials);
  if (unknown.length) {
    return { field: "lm-prompt", error: `The model has never seen ${unknown.join(", ")}: its vocabulary is the ` +
      `characters of ${info.own ? "the text it was trained on" : "the training plays"}. Remove or replace them.` };
  }
  if (n === null) return { field: "lm-length", error: `Characters to write must be a whole number of at least 1, got “${$("lm-length").value}”.` };
  const length = [...prompt].length; // characters (code points), as the model reads them: an emoji is one, not two
  if (length + n > info.max_len) {
    return { field: "lm-prompt", error: `The prompt has ${length} characters and you asked for ${n} more: ` +
      `${length + n}, more than the model's ${info.max_len} positions. Shorten the prompt or ask for fewer.` };
  }
  if (topK === null) return { field: "lm-topk", error: `Top-k must be a whole number, 0 for off, got “${$("lm-topk").value}”.` };
  if (seed === null) return { field: "lm-seed", error: `The seed must be a whole number from 0 up, got “${$("lm-seed").value}”.` };
  return { prompt, n, temperature, topK, topP, seed };
}

// The last position's logits (V) and the settings -> {probs: the model's own probabilities (temperature 1),
// order: the ids likeliest first, sampling: the distribution the next character is drawn from}.
// As _sample_next in transformer_lib/decoding.py: logits / temperature; keep every logit at least the k-th largest
// (top-k, 0: all; ties with the k-th are kept, as there); then the smallest set of likeliest whose
// probabilities, renormalised, reach top-p (1: all; the likeliest is always kept); renormalise.
// Temperature 0 is greedy.
function distribution(logits, { temperature, topK, topP }) {
  const probs = softmax(logits);
  const order = probs.map((_, i) => i).sort((i, j) => probs[j] - probs[i]); // likeliest first
  if (temperature === 0) {
    const best = argmax(logits);
    return { probs, order, sampling: probs.map((_, i) => (i === best ? 1 : 0)) };
  }
  const scaled = softmax(Array.from(logits, (x) => x / temperature)); // same order as `probs`
  const kth = topK === 0 ? 0 : scaled[order[Math.min(topK, order.length) - 1]];
  const inTopK = order.filter((i) => scaled[i] >= kth); // likeliest first
  const massK = inTopK.reduce((sum, i) => sum + scaled[i], 0);
  const kept = new Array(scaled.length).fill(false);
  let before = 0; // mass of the likelier tokens within the top-k
  for (const i of inTopK) {
    if (topP >= 1 || before / massK < topP) kept[i] = true;
    before += scaled[i];
  }
  const mass = scaled.reduce((sum, p, i) => sum + (kept[i] ? p : 0), 0);
  return { probs, order, sampling: scaled.map((p, i) => (kept[i] ? p / mass : 0)) };
}

// Draw an id from `sampling` (probabilities summing to 1) with `random`, a function giving numbers in [0, 1)
function sample(random, sampling) {
  const u = random();
  let total = 0;
  for (let i = 0; i < sampling.length; i++) {
    total += sampling[i];
    if (u < total) return i;
  }
  return sampling.findLastIndex((p) => p > 0); // u beyond the sum's rounding: the last possible id
}

let model = null; // the model the page writes with: the book's, or the reader's own (ownModelPicker)
let bookModel = null;
let running = false;
let steps = []; // per generated character: {context, chosen, candidates [{index, token, p, drawn}]}

function showStep(k) {
  const step = steps[k];
  if (!step) return;
  $("lm-step-label").textContent = `Step ${k + 1} of ${steps.length}: after “…${[...step.context].slice(-20).join("").replaceAll("\n", "↵")}”`;
  const body = $("lm-candidates").querySelector("tbody");
  body.replaceChildren(...step.candidates.map((c) => {
    const tr = document.createElement("tr");
    if (c.index === step.chosen) tr.className = "playground-chosen";
    const cells = [shown(c.token), c.p.toFixed(3), c.drawn.toFixed(3), c.index === step.chosen ? "chosen" : ""];
    tr.append(...cells.map((text) => Object.assign(document.createElement("td"), { textContent: text })));
    return tr;
  }));
}

async function generate() {
  const { info } = model;
  const key = info.own ? "own" : "shakespeare_char"; // whose timings: the book's model's, or the reader's
  const s = settings(info);
  for (const id of ["lm-prompt", "lm-length", "lm-topk", "lm-seed"]) $(id).setAttribute("aria-invalid", String(s.field === id));
  if (showError($("lm-error"), $(s.field ?? "lm-prompt"), s.error)) {
    $("lm-generated").textContent = ""; // the text shown belonged to the previous prompt
    $("lm-prompt-echo").textContent = "";
    return;
  }
  const start = performance.now();
  const ids = [...s.prompt].map((c) => info.itos.indexOf(c)); // (T,) character ids
  const random = generator(s.seed);
  const decoder = new CachedDecoder(model); // the cache: keys and values of the positions fed so far
  let fresh = ids.slice(); // the ids the model has not seen: the prompt, then each chosen character
  const run = { cache: USE_CACHE, fed: decoder.fed, run_ms: 0 }; // what the browser tests and the benchmark read
  let paintedAt = start;
  steps = [];
  $("lm-prompt-echo").textContent = s.prompt;
  $("lm-generated").textContent = "";
  for (let step = 0; step < s.n && running; step++) {
    const tokens = USE_CACHE ? fresh : ids; // without the cache: the whole text, from an empty past
    if (!USE_CACHE) decoder.reset();
    const began = performance.now();
    const logits = await decoder.feed(tokens); // (V,): the last position's
    run.run_ms += performance.now() - began;
    const d = distribution(logits, s);
    const next = sample(random, d.sampling); // at temperature 0, sampling is 1 at the argmax
    const shownIds = d.order.slice(0, SHOWN_CANDIDATES);
    if (!shownIds.includes(next)) shownIds.push(next); // a draw from the tail is shown too, as the last row
    const candidates = shownIds.map((i) => ({ index: i, token: info.itos[i], p: d.probs[i], drawn: d.sampling[i] }));
    steps.push({ context: ids.map((i) => info.itos[i]).join(""), chosen: next, candidates });
    ids.push(next);
    fresh = [next];
    $("lm-generated").textContent += info.itos[next];
    $("lm-step").max = String(steps.length);
    $("lm-step").value = String(steps.length);
    showStep(steps.length - 1);
    if (performance.now() - paintedAt >= FRAME_MS) { // also lets a click on Stop in
      await painted();
      paintedAt = performance.now();
    }
  }
  window.playgroundTimings[key] ??= {};
  firstAnswer(key, start);
  window.playgroundTimings[key].last_run = { ...run, total_ms: performance.now() - start };
  $("lm-step").disabled = false;
  $("lm-status").textContent = `${running ? "Done" : "Stopped"}: ${steps.length} characters written ` +
    `(temperature ${s.temperature}${s.topK ? `, top-k ${s.topK}` : ""}${s.topP < 1 ? `, top-p ${s.topP}` : ""}): ` +
    $("lm-generated").textContent;
}

// The length field's limit for a model with `max_len` positions; a length that no longer fits after the prompt is
// shortened to fit, so that a smaller model loaded from disk writes at once (the status counts what it wrote)
function fitLength(info) {
  $("lm-length").max = String(info.max_len - 1);
  const room = info.max_len - [...$("lm-prompt").value].length;
  if (room >= 1 && Number($("lm-length").value) > room) $("lm-length").value = String(room);
}

let writing = false; // true while generate runs (running turns false when Stop asks it to end)

async function onSubmit(event) {
  event?.preventDefault();
  if (model === null || writing) return; // the buttons stay enabled, so focus stays where the reader left it
  running = writing = true;
  $("lm-playground").dataset.busy = "true"; // the browser tests wait for "false" before they ask for a text
  await guarded("language model: writing", $("lm-status"), generate);
  running = writing = false;
  $("lm-playground").dataset.busy = "false";
}

async function main() {
  await fillDefaults("language_model"); // the form's starting values, which the build's answers are for
  ownModelPicker("lm", "language_model", { // the reader's own model, read from disk: write with it at once
    onLoad: async (loaded) => {
      while (writing) { // a text still being written stops first
        running = false;
        await painted();
      }
      model = loaded;
      fitLength(loaded.info);
      onSubmit(); // writes with it; not awaited, so that the page says at once which model it runs
    },
    onReset: async () => {
      while (writing) {
        running = false;
        await painted();
      }
      model = bookModel;
      if (model !== null) {
        fitLength(model.info);
        onSubmit();
      }
    },
  });
  bookModel = await loadModel("shakespeare_char", $("lm-status"));
  model ??= bookModel; // a file the reader picked while the book's model loaded is kept
  for (const id of ["lm-temperature", "lm-topp"]) {
    const show = () => { $(`${id}-value`).textContent = $(id).value; };
    $(id).addEventListener("input", show);
    show();
  }
  $("lm-step").addEventListener("input", () => guarded("language model: showing a step", $("lm-status"),
    async () => showStep(Number($("lm-step").value) - 1)));
  $("lm-form").addEventListener("submit", onSubmit);
  $("lm-stop").addEventListener("click", () => { running = false; });
  await onSubmit(); // one sample with the page's settings, so the page opens with an answer
}

startPage("language model", $("lm-status"), main);
