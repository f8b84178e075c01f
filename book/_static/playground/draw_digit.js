// Draw a digit: chapter 16's Vision Transformer reads the reader's drawing and answers with ten probabilities.
//
// The model (models/digits_vit.onnx) is tl.vit.VisionTransformer: an 8 x 8 image cut into 16 patches of 2 x 2 cells,
// a class token in front of them, 2 layers of 4 heads; trained by the digits_vit recipe and exported by
// transformer_lib.export.export_onnx:
//   images (1, 1, 8, 8), each cell in 0..1 -> logits (1, 10), attention (L, h, 17, 17), the class token first
// The reader draws on a canvas of 32 x 32 pixels, each on or off, or sets the 8 x 8 cells from the keyboard. A cell
// of the model's input is the count of inked pixels in its 4 x 4 block, 0 to 16, divided by 16: how scikit-learn's
// digits were made, and what tl.vit.digits_data gives the model. The drawing is kept as the 32 x 32 pixels; a cell
// set from the keyboard, or from an example (meta.json's "examples", written by tools/playground_build/draw_digit.py),
// gets its count of pixels in a fixed dithered order, so its count is exactly the one asked for. An empty drawing is
// refused with a message, and the model is not run on it. The probabilities are the softmax of the logits; the
// attention shown is the class token's row of the chosen layer's weights over the 16 patches, one head's or the mean.

import {
  argmax, cell, clearResult, fillDefaults, fillSelect, firstAnswer, guarded, loadModel, OwnModelError, ownModelPicker,
  rows, showError, softmax, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);

// The order in which a 4 x 4 block's pixels are inked for a count of 0..16 (a Bayer matrix): the pixels whose
// number is below the count hold ink, so a half cell is a checkerboard and every count is exact
const ORDER = [[0, 8, 2, 10], [12, 4, 14, 6], [3, 11, 1, 9], [15, 7, 13, 5]];
const BRUSH = 1.6; // the pen's radius in canvas pixels: a stroke about three pixels wide, most of a cell
const SCALE = 8; // screen pixels per canvas pixel, at the canvas's own size (256 x 256)

let model = null; // {ort, session, info}, once loaded: the book's model, or the reader's own (ownModelPicker)
let bookModel = null;
let size = null; // {n: cells per side (8), block: pixels per cell (4), canvas: pixels per side (32), levels: 16}
let bitmap = null; // the drawing: canvas x canvas pixels, 1 = ink
let active = { r: 0, c: 0 }; // the grid's cell that Tab reaches (a roving tabindex)
let answer = null; // the last answer shown: {out, p, counts}, redrawn when the layer or head changes
let runs = 0; // how many times the model ran (the tests check that an empty drawing does not run it)

// The drawing -> each cell's count of inked pixels, row by row (n * n numbers, 0..levels)
function counts() {
  const { n, block, canvas } = size;
  const out = new Array(n * n).fill(0);
  for (let y = 0; y < canvas; y++) {
    for (let x = 0; x < canvas; x++) out[Math.floor(y / block) * n + Math.floor(x / block)] += bitmap[y * canvas + x];
  }
  return out;
}

// Give cell (r, c) exactly `count` inked pixels, in ORDER
function setCell(r, c, count) {
  const { block, canvas } = size;
  for (let i = 0; i < block; i++) {
    for (let j = 0; j < block; j++) bitmap[(r * block + i) * canvas + c * block + j] = ORDER[i][j] < count ? 1 : 0;
  }
}

// Counts (n rows of n) -> the drawing, each cell with its count of pixels
function setCounts(pixels) {
  pixels.forEach((row, r) => row.forEach((count, c) => setCell(r, c, count)));
}

// The pen at (x, y), in canvas pixels: every pixel whose centre is within BRUSH of it gets ink, or loses it
function stamp(x, y, ink) {
  const { canvas } = size;
  for (let py = Math.max(0, Math.floor(y - BRUSH)); py <= Math.min(canvas - 1, Math.floor(y + BRUSH)); py++) {
    for (let px = Math.max(0, Math.floor(x - BRUSH)); px <= Math.min(canvas - 1, Math.floor(x + BRUSH)); px++) {
      if ((px + 0.5 - x) ** 2 + (py + 0.5 - y) ** 2 <= BRUSH ** 2) bitmap[py * canvas + px] = ink;
    }
  }
}

// The pen from a to b, stamped every quarter pixel so that a fast stroke leaves no gaps
function stroke(a, b, ink) {
  const steps = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y) * 4));
  for (let k = 0; k <= steps; k++) stamp(a.x + (b.x - a.x) * k / steps, a.y + (b.y - a.y) * k / steps, ink);
}

// The canvas: ink on white paper (in both themes), thin lines between the cells and darker ones between the patches
function drawCanvas() {
  const { n, block, canvas } = size;
  const ctx = $("draw-canvas").getContext("2d");
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, canvas * SCALE, canvas * SCALE);
  ctx.fillStyle = "#1a1a1a";
  for (let y = 0; y < canvas; y++) {
    for (let x = 0; x < canvas; x++) if (bitmap[y * canvas + x]) ctx.fillRect(x * SCALE, y * SCALE, SCALE, SCALE);
  }
  const patch = model.info.patch_size;
  for (let k = 1; k < n; k++) {
    const at = k * block * SCALE;
    ctx.fillStyle = k % patch === 0 ? "rgba(31, 78, 140, 0.55)" : "rgba(120, 130, 145, 0.35)";
    ctx.fillRect(at - 1, 0, k % patch === 0 ? 2 : 1, canvas * SCALE);
    ctx.fillRect(0, at - 1, canvas * SCALE, k % patch === 0 ? 2 : 1);
  }
}

const describe = (r, c, count) => `Row ${r + 1}, column ${c + 1}: ink ${count} of ${size.levels}`;

// The grid the model reads: one shaded cell per count, its count in its name and in data-count
function drawGrid(values) {
  const { n, levels } = size;
  for (let r = 0; r < n; r++) {
    for (let c = 0; c < n; c++) {
      const node = $(`draw-cell-${r}-${c}`), count = values[r * n + c];
      node.style.background = `hsl(0, 0%, ${(100 - 90 * count / levels).toFixed(1)}%)`;
      node.dataset.count = String(count);
      node.setAttribute("aria-label", describe(r, c, count));
      node.title = describe(r, c, count);
    }
  }
  $("draw-grid").dataset.pixels = values.join(",");
}

// The 8 x 8 grid's cells, in rows: role grid, one cell in the Tab order at a time
function buildGrid() {
  const { n } = size;
  const grid = $("draw-grid");
  grid.setAttribute("role", "grid");
  grid.replaceChildren(...Array.from({ length: n }, (_, r) => {
    const row = cell("div", "", { role: "row", class: "draw-row" });
    row.append(...Array.from({ length: n }, (_, c) => {
      const classes = ["draw-cell"];
      if (c % model.info.patch_size === 0) classes.push("draw-patch-left");
      if (r % model.info.patch_size === 0) classes.push("draw-patch-top");
      return cell("div", "", { role: "gridcell", id: `draw-cell-${r}-${c}`, class: classes.join(" "),
        tabindex: r === active.r && c === active.c ? "0" : "-1", "data-row": String(r), "data-col": String(c) });
    }));
    return row;
  }));
}

// Move the grid's focus to cell (r, c), which becomes the one in the Tab order
function focusCell(r, c) {
  const { n } = size;
  active = { r: Math.min(n - 1, Math.max(0, r)), c: Math.min(n - 1, Math.max(0, c)) };
  for (const node of $("draw-grid").querySelectorAll("[role=gridcell]")) node.tabIndex = -1;
  const node = $(`draw-cell-${active.r}-${active.c}`);
  node.tabIndex = 0;
  node.focus();
}

// A cell's next ink level, as Space and a click give it: none, half, full, then none again
function nextLevel(count) {
  const half = size.levels / 2;
  return count < half ? half : count < size.levels ? size.levels : 0;
}

function onGridKey(e) {
  const { n } = size;
  const { r, c } = active;
  const moves = { ArrowUp: [r - 1, c], ArrowDown: [r + 1, c], ArrowLeft: [r, c - 1], ArrowRight: [r, c + 1],
    Home: e.ctrlKey ? [0, 0] : [r, 0], End: e.ctrlKey ? [n - 1, n - 1] : [r, n - 1] };
  if (e.key in moves) {
    e.preventDefault();
    focusCell(...moves[e.key]);
  } else if (e.key === " " || e.key === "Enter") {
    e.preventDefault();
    setCell(r, c, nextLevel(counts()[r * n + c]));
    changed("Your drawing.");
  } else if (e.key === "Delete" || e.key === "Backspace") {
    e.preventDefault();
    setCell(r, c, 0);
    changed("Your drawing.");
  }
}

function onGridClick(e) {
  const node = e.target.closest("[role=gridcell]");
  if (node === null) return;
  const r = Number(node.dataset.row), c = Number(node.dataset.col);
  focusCell(r, c);
  setCell(r, c, nextLevel(counts()[r * size.n + c]));
  changed("Your drawing.");
}

// Pointer drawing on the canvas (mouse, pen or finger): a stroke from each position to the next
function wireCanvas() {
  const canvas = $("draw-canvas");
  let last = null;
  const at = (e) => { // the pointer in canvas pixels: inside the canvas's border, at whatever size it is shown
    const box = canvas.getBoundingClientRect();
    return { x: (e.clientX - box.left - canvas.clientLeft) / canvas.clientWidth * size.canvas,
      y: (e.clientY - box.top - canvas.clientTop) / canvas.clientHeight * size.canvas };
  };
  const ink = () => ($("draw-erase").checked ? 0 : 1);
  canvas.addEventListener("pointerdown", (e) => {
    if (e.pointerType === "mouse" && e.button !== 0) return;
    e.preventDefault();
    canvas.setPointerCapture(e.pointerId);
    last = at(e);
    stroke(last, last, ink());
    changed("Your drawing.");
  });
  canvas.addEventListener("pointermove", (e) => {
    if (last === null) return;
    const next = at(e);
    stroke(last, next, ink());
    last = next;
    changed("Your drawing.");
  });
  const end = () => { last = null; };
  canvas.addEventListener("pointerup", end);
  canvas.addEventListener("pointercancel", end);
}

// The ten probabilities, digit by digit, the likeliest marked; the table keeps the counts they answer
function showProbabilities(p, values) {
  const best = argmax(p);
  const table = $("draw-probs");
  table.dataset.pixels = values.join(",");
  table.tBodies[0].replaceChildren(...p.map((q, d) => {
    const tr = cell("tr", "", { "data-digit": String(d), "data-p": String(q) });
    if (d === best) tr.className = "playground-chosen";
    const bar = cell("div", "", { class: "playground-bar draw-bar", "aria-hidden": "true" });
    const fill = cell("div");
    fill.style.width = `${(100 * q).toFixed(1)}%`;
    bar.append(fill);
    const barCell = cell("td");
    barCell.append(bar);
    tr.append(cell("th", String(d), { scope: "row" }), cell("td", q.toFixed(4)), barCell);
    return tr;
  }));
}

// The class token's attention over the 16 patches, as a 4 x 4 table laid out as the patches lie in the image, for the
// chosen layer and head (or the mean of the heads): each cell shaded by its weight (relative to the largest) and
// written in it. Returns what the status line says about it.
function drawAttention() {
  if (answer === null) return null;
  const { info } = model;
  const [, h, T] = answer.out.attention.dims;
  const layer = Number($("draw-layer").value), head = $("draw-head").value;
  const heads = head === "mean" ? Array.from({ length: h }, (_, k) => k) : [Number(head)];
  const from = heads.map((k) => rows(answer.out.attention, layer, k)[0]); // the class token's row (T,) of each head
  const weights = Array.from({ length: T }, (_, t) => from.reduce((sum, row) => sum + row[t], 0) / from.length);
  const patches = weights.slice(1), side = Math.round(Math.sqrt(patches.length));
  const largest = Math.max(...patches);
  const which = head === "mean" ? `the mean of the ${h} heads` : `head ${Number(head) + 1}`;
  const table = $("draw-attention");
  table.caption.textContent = `Attention from the class token to each patch in layer ${layer + 1}, ${which}; ` +
    `the patches lie as in the image, ${info.patch_size} × ${info.patch_size} cells each`;
  const headRow = cell("tr");
  headRow.append(cell("td"), ...Array.from({ length: side }, (_, c) => cell("th", `column ${c + 1}`, { scope: "col" })));
  table.tHead.replaceChildren(headRow);
  table.tBodies[0].replaceChildren(...Array.from({ length: side }, (_, r) => {
    const tr = cell("tr");
    tr.append(cell("th", `row ${r + 1}`, { scope: "row" }), ...Array.from({ length: side }, (_, c) => {
      const w = patches[r * side + c];
      const td = cell("td", w.toFixed(2), { class: "draw-weight", "data-w": String(w),
        title: `patch row ${r + 1}, column ${c + 1}: ${w.toFixed(4)}` });
      td.style.background = `hsl(215, 75%, ${(97 - 37 * (largest > 0 ? w / largest : 0)).toFixed(1)}%)`;
      return td;
    }));
    return tr;
  }));
  const most = argmax(patches);
  const where = `patch row ${Math.floor(most / side) + 1}, column ${most % side + 1}`;
  table.dataset.self = String(weights[0]);
  $("draw-attention-note").textContent = `Layer ${layer + 1}, ${which}: the class token looks most at ${where} ` +
    `(${patches[most].toFixed(2)}) and keeps ${weights[0].toFixed(2)} for itself; the ${patches.length} patches ` +
    `and the class token share 1.`;
  return { layer, which, where, weight: patches[most] };
}

const EMPTY = "The drawing is empty, so there is nothing to read: draw a digit on the canvas, give the grid's cells " +
  "ink with the keyboard, or load an example. (The model would still name a digit, so the page does not ask it.)";

// Read the drawing as it is now: refuse an empty one with a message, or run the model and show its answer
async function read() {
  const { ort, session, info } = model;
  const values = counts();
  if (values.every((v) => v === 0)) {
    answer = null; // the last answer goes, and its summary in the live region: the alert says why
    showError($("draw-error"), $("draw-grid"), EMPTY);
    clearResult($("draw-probs").tBodies[0], $("draw-attention").tHead, $("draw-attention").tBodies[0],
      $("draw-attention-note"), $("draw-status"));
    $("draw-attention").caption.textContent = "";
    $("draw-probs").dataset.pixels = "";
    return;
  }
  const { n } = size;
  const start = performance.now();
  const images = new ort.Tensor("float32", Float32Array.from(values, (v) => v / info.levels), [1, 1, n, n]);
  const out = await session.run({ images }); // logits (1, 10), attention (L, h, 1 + N, 1 + N)
  runs += 1;
  $("draw-playground").dataset.runs = String(runs);
  firstAnswer("draw_digit", start);
  const p = softmax(out.logits.data);
  answer = { out, p, values };
  showError($("draw-error"), $("draw-grid"), null);
  showProbabilities(p, values);
  const seen = drawAttention();
  const order = Array.from(p.keys()).sort((a, b) => p[b] - p[a] || a - b);
  const inked = values.filter((v) => v > 0).length;
  $("draw-status").textContent = `${inked} of ${n * n} cells hold ink. The model reads ${order[0]} with probability ` +
    `${p[order[0]].toFixed(3)}; next comes ${order[1]} (${p[order[1]].toFixed(3)}). The class token in layer ` +
    `${seen.layer + 1}, ${seen.which}, looks most at ${seen.where} (${seen.weight.toFixed(2)}).`;
}

let running = false; // the model runs one drawing at a time; a change meanwhile is read when it is done
let pending = false;

async function drain() {
  running = true;
  $("draw-playground").dataset.busy = "true";
  try {
    while (pending) {
      pending = false;
      await read();
    }
  } finally {
    running = false;
    $("draw-playground").dataset.busy = "false";
  }
}

// The drawing changed (`source` says whose it is): redraw it at once, and read it when the model is free
function changed(source) {
  $("draw-source").textContent = source;
  drawCanvas();
  drawGrid(counts());
  pending = true;
  if (!running) guarded("draw digit: reading the drawing", $("draw-status"), drain);
}

function loadExample() {
  const name = $("draw-example").value;
  const example = model.info.examples[name];
  if (example === undefined) throw new Error(`models/meta.json has no example "${name}"`);
  setCounts(example.pixels);
  changed(`A ${example.label} written by hand, number ${example.index + 1} of the digits held out from training: ` +
    "the model never saw it.");
}

// Run `next` from now on: its layers and heads in the selects, the grid's patch lines, the drawing read again
function useModel(next) {
  model = next;
  fillSelect($("draw-layer"), next.info.layers, next.info.layers - 1);
  fillSelect($("draw-head"), next.info.heads, 0, "mean of the heads");
  $("draw-head").value = "mean";
  buildGrid();
  changed($("draw-source").textContent);
}

async function main() {
  await fillDefaults("draw_digit"); // the example the page opens with, which the build's answers are for
  ownModelPicker("draw", "digit_classifier", { // the reader's own ViT, read from disk; it reads the same drawing
    fits: (info) => (info.image_size !== 8 || info.classes !== 10 || 8 % info.patch_size !== 0
      ? `its model reads ${info.image_size} × ${info.image_size} images in patches of ${info.patch_size} and tells ` +
        `${info.classes} classes; this page draws 8 × 8 digits and shows ten classes.` : null),
    onLoad: async (loaded) => {
      if (bookModel === null) {
        throw new OwnModelError("The page is still loading the book's model, which sets up its canvas: pick or drop " +
          "your file again in a moment.");
      }
      useModel({ ...loaded, info: { ...bookModel.info, ...loaded.info } }); // the canvas and examples: the page's
    },
    onReset: async () => { if (bookModel !== null) useModel(bookModel); },
  });
  model = bookModel = await loadModel("draw_digit", $("draw-status"));
  const { info } = model;
  if (info.block !== ORDER.length || info.block * info.block !== info.levels) {
    throw new Error(`the page inks blocks of ${ORDER.length} × ${ORDER.length} pixels, meta.json says ${info.block}`);
  }
  size = { n: info.image_size, block: info.block, canvas: info.canvas, levels: info.levels };
  bitmap = new Uint8Array(size.canvas * size.canvas);
  buildGrid();
  fillSelect($("draw-layer"), info.layers, info.layers - 1);
  fillSelect($("draw-head"), info.heads, 0, "mean of the heads");
  $("draw-head").value = "mean";
  const redraw = () => guarded("draw digit: drawing the attention", $("draw-status"), async () => { drawAttention(); });
  $("draw-layer").addEventListener("change", redraw);
  $("draw-head").addEventListener("change", redraw);
  $("draw-grid").addEventListener("keydown", onGridKey);
  $("draw-grid").addEventListener("click", onGridClick);
  wireCanvas();
  $("draw-clear").addEventListener("click", () => {
    bitmap.fill(0);
    changed("");
  });
  $("draw-form").addEventListener("submit", (e) => {
    e.preventDefault();
    loadExample();
  });
  loadExample();
}

startPage("draw digit", $("draw-status"), main);
