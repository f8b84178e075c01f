// What the playground pages share: loading onnxruntime-web and a model, reading tensors, drawing a heatmap.
//
// Nothing here runs on a page by itself. A playground's own module imports it, and the runtime
// (onnxruntime-web's ES module, then its 14 MB wasm) is imported the first time a model loads,
// so no other page of the site ever fetches it. Everything comes from this site's own
// _static/playground/: vendor/ (the runtime, copied from npm), models/ (the ONNX files and
// meta.json, both written by tools/build_playground.py) and defaults.json (each page's form's starting
// values, which the build reads too). Nothing leaves the reader's browser.

const HERE = new URL("./", import.meta.url);

// Load times and first-answer times, by model, for the browser tests to report.
const timings = (window.playgroundTimings ??= {});

let runtime = null; // the Promise of the ort module: one per page, made on first use

function loadRuntime() {
  runtime ??= import(new URL("vendor/ort.wasm.min.mjs", HERE).href).then((ort) => {
    ort.env.wasm.numThreads = 1; // one thread needs no cross-origin isolation from the server
    ort.env.wasm.wasmPaths = new URL("vendor/", HERE).href; // this site's copy, never a CDN
    return ort;
  });
  return runtime;
}

let meta = null;

// models/meta.json: each model's file, size, vocabulary, special tokens' ids and lengths
function loadMeta() {
  meta ??= fetch(new URL("models/meta.json", HERE)).then((r) => {
    if (!r.ok) throw new Error(`models/meta.json answered ${r.status}`);
    return r.json();
  });
  return meta;
}

let defaults = null;

// defaults.json, next to this file: each page's form's starting values, by field id. tools/build_playground.py
// records PyTorch's answers on the same values, so a page opens on the inputs whose answers the tests know.
function loadDefaults() {
  defaults ??= fetch(new URL("defaults.json", HERE)).then((r) => {
    if (!r.ok) throw new Error(`defaults.json answered ${r.status}`);
    return r.json();
  });
  return defaults;
}

// Give page `page`'s form its starting values from defaults.json (the page's HTML has none of its own). Each is
// set as the field's default (its value attribute, a textarea's text, a checkbox's checked, an option's selected),
// which a field the reader has not touched yet shows at once, and to which the form's reset returns.
export async function fillDefaults(page) {
  const values = (await loadDefaults())[page];
  if (values === undefined) throw new Error(`defaults.json has no page "${page}"`);
  for (const [id, value] of Object.entries(values)) {
    const field = document.getElementById(id);
    if (field === null) throw new Error(`defaults.json names the field "${id}", which the page lacks`);
    if (field.type === "checkbox") field.defaultChecked = value === true;
    else if (field instanceof HTMLSelectElement) {
      for (const option of field.options) option.defaultSelected = option.value === String(value);
    } else field.defaultValue = String(value);
  }
}

const megabytes = (bytes) => `${(bytes / 1e6).toFixed(2)} MB`;

const reported = new WeakSet(); // the errors already shown in a page and logged, so that none is told twice

// An error's own words, whatever was thrown, without a final full stop (the messages add their own)
const reason = (err) => (err instanceof Error ? err.message : String(err)).replace(/\.+$/, "");

// Say that something failed: `message` in the page's live region `status`, where a reader sees it, and
// the same with `where` (the page and the step) and the error itself in the console, where a
// developer and the browser tests see it. Nothing a page catches fails silently.
function report(where, status, message, err) {
  status.textContent = message;
  console.error(`Playground ${where}: ${message}`, err);
  if (Object(err) === err) reported.add(err);
}

// Start the runtime and one model, saying so in `status`: -> {ort, session, info}. If it fails, the
// page's status line and the console both say why, and the error is thrown on (startPage knows it was told).
export async function loadModel(key, status) {
  const start = performance.now();
  let built = true; // false when the site has no playground files: built without npm
  try {
    const all = await loadMeta().catch((err) => {
      built = false;
      throw err;
    });
    const info = all[key];
    if (info === undefined) throw new Error(`models/meta.json has no model "${key}"`);
    status.textContent = `Loading the model (${megabytes(info.bytes)}) and the runtime ` +
      `(${megabytes(all.runtime_bytes)}, once per visit) into this page…`;
    const ort = await loadRuntime();
    const session = await ort.InferenceSession.create(new URL(`models/${info.file}`, HERE).href,
      { executionProviders: ["wasm"] });
    timings[key] = { load_ms: Math.round(performance.now() - start) };
    status.textContent = `Model loaded (${megabytes(info.bytes)}) in ${(timings[key].load_ms / 1000).toFixed(1)} s. ` +
      "It runs here, in your browser.";
    return { ort, session, info };
  } catch (err) {
    report(`${key}: loading the model`, status, `This playground could not start (${reason(err)}).` + (built ? "" :
      " The website was built without its playground files, which need node and npm: `npm ci`, then `make book`."), err);
    throw err;
  }
}

// Show `message` (or clear it when null) in the page's error paragraph, and mark `field` invalid for
// assistive technology; returns true when there was an error.
export function showError(errorElement, field, message) {
  errorElement.textContent = message ?? "";
  field.setAttribute("aria-invalid", message ? "true" : "false");
  return Boolean(message);
}

// Run `work` (an async function) for step `where` ("numbers: translating"); if it throws, say so in
// `status` and in the console, and return normally so that the page stays usable.
export async function guarded(where, status, work) {
  try {
    await work();
  } catch (err) {
    report(where, status, `Something went wrong while the model ran: ${reason(err)}. Reload the page to start again.`, err);
  }
}

// Run a page's `main` (an async function: load its model, wire its controls, answer once). An error
// that loadModel or guarded has not reported yet, such as a bug while wiring the controls, is reported here.
export function startPage(page, status, main) {
  main().catch((err) => {
    if (!reported.has(err)) {
      report(`${page}: starting`, status, `This playground could not start (${reason(err)}). Reload the page to try again.`, err);
    }
  });
}

// Record the first answer's time once per model.
export function firstAnswer(key, since) {
  if (timings[key] && timings[key].first_answer_ms === undefined) {
    timings[key].first_answer_ms = Math.round(performance.now() - since);
  }
}

// ids (n numbers) -> an int64 tensor of shape (1, n)
export const idsTensor = (ort, ids) => new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]);

// A language model exported with a key-value cache (transformer_lib.export.export_step), which the language-model and
// the assistant pages decode with:
//   tokens (1, T_new), past_keys, past_values (L, 1, h_kv, T_past, d_k)
//     -> logits (1, T_new, V), present_keys, present_values (L, 1, h_kv, T_past + T_new, d_k)
// feed(ids) runs the ids the model has not seen yet after the cache so far, keeps the cache the call returns and
// gives the last position's logits (V). The first call feeds the prompt with an empty cache (T_past = 0); each
// later call only the id just chosen, so a step computes one position instead of the whole text so far. reset()
// empties the cache. `fed` counts the ids each call fed, for the browser tests and the benchmark.
export class CachedDecoder {
  constructor({ ort, session, info }) {
    this.ort = ort;
    this.session = session;
    this.empty = new ort.Tensor("float32", new Float32Array(0), [info.layers, 1, info.kv_heads, 0, info.head_width]);
    this.fed = [];
    this.reset();
  }

  reset() {
    this.past = { keys: this.empty, values: this.empty }; // (L, 1, h_kv, 0, d_k): no position seen yet
  }

  async feed(ids) {
    const out = await this.session.run({ tokens: idsTensor(this.ort, ids), past_keys: this.past.keys,
      past_values: this.past.values });
    this.past = { keys: out.present_keys, values: out.present_values }; // (L, 1, h_kv, T_past + T_new, d_k) each
    this.fed.push(ids.length);
    const [, T, V] = out.logits.dims; // logits (1, T_new, V)
    return out.logits.data.subarray((T - 1) * V, T * V); // (V,): the last position's
  }
}

// Greedy decoding with the cache, as transformer_lib.decoding.generate at temperature 0: `prompt` (ids) once, then
// each id chosen, the likeliest (the first on a tie, as torch.argmax). Stops after `maxNew` ids, or once the id
// `stop` is written (it is kept). `each(written)` is called with the ids so far after each one. -> the ids written
export async function greedy(decoder, prompt, maxNew, stop = null, each = async () => {}) {
  decoder.reset();
  const written = [];
  let fresh = prompt;
  while (written.length < maxNew) {
    const next = argmax(await decoder.feed(fresh));
    written.push(next);
    await each(written);
    if (next === stop) break;
    fresh = [next];
  }
  return written;
}

// A tensor of dims (...lead, R, C) and one index per leading dim -> R rows of C numbers (views, no copy)
export function rows(tensor, ...lead) {
  const dims = tensor.dims;
  const R = dims[dims.length - 2], C = dims[dims.length - 1];
  let offset = 0;
  lead.forEach((i, k) => { offset = offset * dims[k] + i; });
  offset *= R * C;
  return Array.from({ length: R }, (_, r) => tensor.data.subarray(offset + r * C, offset + (r + 1) * C));
}

// Rows of several matrices of the same shape -> their element-wise mean (the "all heads" view)
export function meanRows(matrices) {
  return matrices[0].map((row, r) => row.map((_, c) => matrices.reduce((s, m) => s + m[r][c], 0) / matrices.length));
}

// The index of the largest value; the first one on a tie, as torch.argmax
export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

// logits (V) -> probabilities (V), softmax computed from the largest logit down so nothing overflows
export function softmax(logits) {
  const top = Math.max(...logits);
  const e = Array.from(logits, (x) => Math.exp(x - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / sum);
}

// An element `tag` holding `text`, with `attributes` set: the pages build their tables and lists with it
export const cell = (tag, text = "", attributes = {}) => {
  const node = document.createElement(tag);
  node.textContent = text;
  for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, v);
  return node;
};

// A piece of the reader's text as a message quotes it: in quotes, or as its code point when it cannot be seen
export const quoted = (w) => (/^[\p{C}\p{Z}]$/u.test(w)
  ? `U+${w.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}` : `“${w}”`);

// ["a", "b", "c"] -> "a, b and c"
export const listed = (items) => (items.length < 2 ? items.join("")
  : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`);

// 1 -> "1 blank", 2 -> "2 blanks"
export const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

// How a token is written on a label: visible stand-ins for a space, a line break and the specials
export function shown(token) {
  return { " ": "␣", "\n": "↵", "<pad>": "·pad·", "<bos>": "·bos·", "<eos>": "·eos·", "<unk>": "·unk·" }[token] ?? token;
}

// Characters of `text` that the vocabulary lacks, each once, written for a message: “x”, “%”.
// `itos` is the model's vocabulary and `specials` its special tokens (meta.json): the first specials.count
// ids are <pad>, <bos> and the like, which no typed character stands for.
export function unknownCharacters(text, itos, specials) {
  const known = new Set(itos.slice(specials.count));
  return [...new Set(text)].filter((c) => !known.has(c)).map((c) => `“${shown(c)}”`);
}

const SVG = "http://www.w3.org/2000/svg";

function svgNode(name, attributes = {}, text = "") {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

// A heatmap of attention weights into `container`, replacing what was there.
//   weights: R rows of C numbers in [0, 1]; rowLabels (R), colLabels (C): what the rows and columns are
//   options: {label: the picture's accessible name, rowTitle, colTitle,
//             masked(r, c): true draws the cell hatched, outlined(r, c): true draws a thick border}
// Each cell keeps its exact weight in data-w (the browser tests read it) and shows it in a tooltip.
export function heatmap(container, weights, rowLabels, colLabels, options = {}) {
  const cell = 26, left = 12 + 9 * Math.max(...rowLabels.map((l) => l.length), 1);
  const top = 12 + 8 * Math.max(...colLabels.map((l) => l.length), 1);
  const width = left + cell * colLabels.length + 4, height = top + cell * rowLabels.length + 4;
  const svg = svgNode("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": options.label ?? "attention weights", class: "playground-heatmap" });
  const hatch = svgNode("pattern", { id: `${container.id}-hatch`, width: 6, height: 6, patternUnits: "userSpaceOnUse",
    patternTransform: "rotate(45)" });
  hatch.append(svgNode("rect", { width: 6, height: 6, fill: "#f2f2f2" }),
    svgNode("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#9a9a9a", "stroke-width": 2 }));
  const defs = svgNode("defs");
  defs.append(hatch);
  svg.append(defs);
  colLabels.forEach((label, c) => {
    const x = left + c * cell + cell / 2, y = top - 6;
    svg.append(svgNode("text", { x, y, transform: `rotate(-60 ${x} ${y})`, class: "playground-label" }, label));
  });
  const outlines = []; // (x, y) of the cells to outline, drawn last so that no cell covers them
  weights.forEach((row, r) => {
    svg.append(svgNode("text", { x: left - 6, y: top + r * cell + cell / 2 + 4, "text-anchor": "end",
      class: "playground-label" }, rowLabels[r]));
    Array.from(row).forEach((w, c) => {
      const masked = options.masked?.(r, c) ?? false;
      const rect = svgNode("rect", { x: left + c * cell, y: top + r * cell, width: cell - 1, height: cell - 1,
        fill: masked ? `url(#${container.id}-hatch)` : shade(w), "data-w": String(w), "data-row": r, "data-col": c });
      if (options.outlined?.(r, c)) outlines.push([left + c * cell, top + r * cell]);
      rect.append(svgNode("title", {}, `${options.rowTitle ?? "row"} ${rowLabels[r]} → ${options.colTitle ?? "column"} ` +
        `${colLabels[c]}: ${masked ? "masked, " : ""}${Number(w).toFixed(3)}`));
      svg.append(rect);
    });
  });
  for (const [x, y] of outlines) { // a dark and a white line: one of them stands out on any shade
    svg.append(svgNode("rect", { x: x + 1, y: y + 1, width: cell - 3, height: cell - 3, class: "playground-outlined" }),
      svgNode("rect", { x: x + 2.5, y: y + 2.5, width: cell - 6, height: cell - 6, class: "playground-outlined-inner" }));
  }
  container.replaceChildren(svg, weightsTable(weights, rowLabels, colLabels, options));
}

// The heatmap's numbers as a table, folded under the picture: for a keyboard or a screen reader,
// which cannot reach the cells' tooltips, and for a reader who wants the values
function weightsTable(weights, rowLabels, colLabels, options) {
  const cell = (tag, text, scope) => Object.assign(document.createElement(tag), { textContent: text, ...(scope && { scope }) });
  const head = document.createElement("tr");
  head.append(cell("th", `${options.rowTitle ?? "row"} \\ ${options.colTitle ?? "column"}`, "col"),
    ...colLabels.map((label) => cell("th", label, "col")));
  const body = weights.map((row, r) => {
    const tr = document.createElement("tr");
    tr.append(cell("th", rowLabels[r], "row"),
      ...Array.from(row, (w, c) => cell("td", options.masked?.(r, c) ? "masked" : Number(w).toFixed(2))));
    return tr;
  });
  const table = document.createElement("table");
  table.className = "playground-weights";
  table.createTHead().append(head);
  table.createTBody().append(...body);
  const details = document.createElement("details");
  details.append(cell("summary", "The same weights as a table"), table);
  return details;
}

// Empty a result area whose answer no longer matches the input (after an error in the input)
export function clearResult(...elements) {
  for (const e of elements) e.replaceChildren();
}

// A weight in [0, 1] -> a colour from near-white (0) to dark blue (1)
function shade(w) {
  const t = Math.min(Math.max(Number(w), 0), 1);
  return `hsl(215, 75%, ${Math.round(97 - 72 * t)}%)`;
}

// Fill a <select> with "1".."n" (shown 1-based, valued 0-based), choosing `chosen`
export function fillSelect(select, n, chosen = 0, extra = null) {
  select.replaceChildren(...Array.from({ length: n }, (_, i) => new Option(String(i + 1), String(i), false, i === chosen)));
  if (extra) select.append(new Option(extra, "mean"));
}

// A small seeded generator (mulberry32): seed (a whole number, 0 to 2^32 - 1) -> a function giving numbers in
// [0, 1). tools/playground_build/inside.py has a copy, number for number, to draw what the pages draw.
export function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Wait for the browser to paint, so that a streamed answer is seen growing
export const painted = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

// The reader's own model: one file written by tl.export.for_playground(model, tokenizer, name) in a notebook, read
// from the reader's disk with a file picker or by dropping it on the page. Nothing is uploaded: the bytes go from
// the file straight into onnxruntime, in this tab. The file (transformer_lib/export.py) is
//   "TBS-PLAYGROUND\r\n" (16 bytes) | format version (uint32, little-endian) | header length n (uint32) |
//   header: n bytes of UTF-8 JSON, what meta.json says of the book's models | the ONNX file
export const OWN_MAX_BYTES = 64_000_000; // PLAYGROUND_MAX_BYTES in transformer_lib/export.py
const OWN_MAGIC = "TBS-PLAYGROUND\r\n";
const OWN_VERSION = 1;
const OWN_KINDS = { // what each kind is, as a message names it, and the inputs and outputs its ONNX file must have
  language_model: { what: "a language model (tl.DecoderOnlyLM with a CharTokenizer)",
    inputs: ["tokens", "past_keys", "past_values"], outputs: ["logits", "present_keys", "present_values"] },
  bracket_classifier: { what: "a bracket classifier (tl.EncoderClassifier with two classes, over ( ) [ ])",
    inputs: ["tokens"], outputs: ["logits", "attention"] },
  digit_classifier: { what: "a digit classifier (tl.vit.VisionTransformer of 8 × 8 images, ten classes, a class token)",
    inputs: ["images"], outputs: ["logits", "attention"] },
};

// A problem with the reader's file, told to the reader as it is (not as "something went wrong")
export class OwnModelError extends Error {}

const isCount = (x) => Number.isInteger(x) && x > 0;

// The header's fields that a page relies on -> what is wrong with them, or null
function headerProblem(h) {
  const fields = ["max_len", "layers", "heads", "kv_heads", "head_width", "parameters", "onnx_bytes"];
  if (h.kind === "digit_classifier") fields.push("image_size", "patch_size", "classes"); // pixels: no vocabulary
  else if (!Array.isArray(h.itos) || !h.itos.every((t) => typeof t === "string")) {
    return "its vocabulary (itos) is not a list of tokens";
  } else if (typeof h.specials !== "object" || !Number.isInteger(h.specials?.count) || h.specials.count >= h.itos.length) {
    return "its special tokens do not fit its vocabulary";
  }
  for (const field of fields) {
    if (!isCount(h[field])) return `its ${field} is ${JSON.stringify(h[field])}, not a whole number above 0`;
  }
  return null;
}

// A File (from the picker or a drop) and the kind of model the page runs -> {ort, session, info}, info being the
// file's header with `bytes`, `file` and `own: true`. Throws OwnModelError, naming what was expected and what
// came, for a file that is too large, not such a file, of another version or kind, cut short, or unreadable.
export async function readOwnModel(file, kind) {
  const expected = `a .playground file written by tl.export.for_playground(model, tokenizer, name)`;
  if (file.size > OWN_MAX_BYTES) {
    throw new OwnModelError(`“${file.name}” has ${megabytes(file.size)}; this page takes ${expected} of up to ` +
      `${megabytes(OWN_MAX_BYTES)}. Train a smaller model (fewer layers or a smaller d_model).`);
  }
  const bytes = new Uint8Array(await file.arrayBuffer());
  const start = String.fromCharCode(...bytes.subarray(0, OWN_MAGIC.length));
  if (bytes.length < OWN_MAGIC.length + 8 || start !== OWN_MAGIC) {
    const seen = [...start].map((c) => (c >= " " && c <= "~" ? c : "·")).join("");
    throw new OwnModelError(`“${file.name}” is not a playground file: this page takes ${expected}, whose first ` +
      `bytes are “TBS-PLAYGROUND”; this one begins “${seen}”` + (file.name.endsWith(".onnx") ? ". An ONNX file " +
      "alone has no tokenizer: write the model with tl.export.for_playground." : "."));
  }
  const view = new DataView(bytes.buffer, OWN_MAGIC.length, 8);
  const version = view.getUint32(0, true), n = view.getUint32(4, true);
  if (version !== OWN_VERSION) {
    throw new OwnModelError(`“${file.name}” has format version ${version}; this page reads version ${OWN_VERSION}. ` +
      "Write it again with this book's transformer_lib.");
  }
  const body = OWN_MAGIC.length + 8;
  if (bytes.length < body + n) {
    throw new OwnModelError(`“${file.name}” is cut short: its header should have ${n} bytes, ${bytes.length - body} ` +
      "are there. Copy the file again.");
  }
  let info;
  try {
    info = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(body, body + n)));
  } catch {
    throw new OwnModelError(`“${file.name}” is damaged: its header is not readable JSON. Write it again.`);
  }
  const want = OWN_KINDS[kind];
  if (info?.kind !== kind) {
    const got = OWN_KINDS[info?.kind]?.what ?? `a model of kind “${info?.kind}”`;
    throw new OwnModelError(`“${file.name}” holds ${got}; this page runs ${want.what}.`);
  }
  const problem = headerProblem(info);
  if (problem) throw new OwnModelError(`“${file.name}” is damaged: ${problem}. Write it again.`);
  const model = bytes.subarray(body + n);
  if (model.length !== info.onnx_bytes) {
    throw new OwnModelError(`“${file.name}” is cut short or padded: its model should have ${info.onnx_bytes} bytes, ` +
      `${model.length} are there. Copy the file again.`);
  }
  const ort = await loadRuntime();
  let session;
  try {
    session = await ort.InferenceSession.create(model, { executionProviders: ["wasm"] });
  } catch (err) {
    throw new OwnModelError(`“${file.name}”: onnxruntime could not read its model (${reason(err)}).`);
  }
  const names = (list) => [...list].sort().join(", ");
  if (names(session.inputNames) !== names(want.inputs) || names(session.outputNames) !== names(want.outputs)) {
    throw new OwnModelError(`“${file.name}”: its model takes ${names(session.inputNames)} and gives ` +
      `${names(session.outputNames)}; this page needs ${names(want.inputs)} in and ${names(want.outputs)} out.`);
  }
  return { ort, session, info: { ...info, bytes: file.size, file: file.name, own: true } };
}

// A sentence about a loaded own model: its name, size, vocabulary and context length (for a ViT: what it reads)
export function describeOwnModel(info) {
  const reads = info.kind === "digit_classifier"
    ? `it reads ${info.image_size} × ${info.image_size} images in patches of ${info.patch_size} × ${info.patch_size} ` +
      `and tells ${info.classes} classes`
    : `a vocabulary of ${info.itos.length} tokens and ${info.max_len} positions`;
  return `Your model “${info.name}” (${info.file}, ${megabytes(info.bytes)}): ${info.parameters.toLocaleString("en")} ` +
    `parameters, ${info.layers} layers of ${info.heads} heads, ${reads}. It runs here, in your browser: the file was ` +
    "read from your disk and nothing was uploaded.";
}

// Wire a page's "Your own model" controls, ids `${prefix}-own-…`: the file picker (-own-file), the drop zone
// (-own), the button back to the book's model (-own-reset), the error paragraph (-own-error) and the line that
// describes the model in use (-own-info). onLoad(loaded) runs once a file is read and checked; onReset() when the
// reader goes back. fits(info), when given, says what the page cannot run in a file of the right kind (or null).
// A bad file leaves the page with the model it had.
export function ownModelPicker(prefix, kind, { onLoad, onReset, fits = () => null }) {
  const $ = (suffix) => document.getElementById(`${prefix}-own${suffix}`);
  const zone = $(""), picker = $("-file"), reset = $("-reset"), error = $("-error"), info = $("-info");
  let latest = 0; // the newest file: a file still being read when another comes is dropped
  let current = info.textContent; // what the info line says of the model the page runs now
  const load = async (file) => {
    if (!file) return;
    const request = ++latest;
    showError(error, picker, null);
    info.textContent = `Reading “${file.name}”…`;
    try {
      const loaded = await readOwnModel(file, kind);
      const misfit = fits(loaded.info);
      if (misfit) throw new OwnModelError(`“${file.name}”: ${misfit}`);
      if (request !== latest) return;
      await onLoad(loaded);
      current = info.textContent = describeOwnModel(loaded.info);
      reset.disabled = false;
    } catch (err) {
      if (request !== latest) return;
      info.textContent = current; // the page still runs the model it ran
      if (!(err instanceof OwnModelError)) console.error(`Playground ${prefix}: running your model`, err);
      showError(error, picker, err instanceof OwnModelError ? err.message
        : `Your model could not run on this page: ${reason(err)}.`);
    } finally {
      picker.value = ""; // so that the same file, written again by the notebook, can be picked again
    }
  };
  picker.addEventListener("change", () => load(picker.files[0]));
  for (const type of ["dragover", "drop"]) { // a file dropped beside the box must not open in place of the page
    window.addEventListener(type, (e) => { if (!zone.contains(e.target)) e.preventDefault(); });
  }
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("playground-drop-over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("playground-drop-over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("playground-drop-over");
    load(e.dataTransfer?.files?.[0]);
  });
  reset.addEventListener("click", async () => {
    latest += 1; // a file still being read is dropped
    picker.focus(); // before the button disables itself, so that keyboard focus stays in the box
    reset.disabled = true;
    showError(error, picker, null);
    current = info.textContent = "The page runs the book's model again.";
    await onReset();
  });
}
