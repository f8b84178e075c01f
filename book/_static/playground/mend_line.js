// Mend the line: chapter 18's BART writes the reader's line back with its gap filled, by beam search.
//
// The model (models/plays_bart.onnx) is tl.bart.BartForConditionalGeneration, 2 + 2 layers, pre-trained on ten plays
// by text infilling (recipes.RECIPES["plays_bart"]) and exported by transformer_lib.export.export_onnx:
//   src (1, S) = words, ONE [MASK] where the gap is, [SEP]; tgt (1, T) = [CLS] and what is written so far
//     -> logits (1, T, V), cross_attention (L, h, T, S)
// The line is split into words as fill_blank.js splits it (PlayWords' pattern and the gap's, from meta.json). The
// search is transformer_lib.decoding.beam_candidates, one hypothesis per call (the file has batch 1 and no cache):
// each step extends every hypothesis still growing by every token, keeps the `beam` likeliest extensions of all of
// them (by summed log-probability; ties: see best()), sets aside those that wrote [SEP], and stops when `beam`
// are set aside or none grows. Finished ones are ranked by log-probability per written token. The fill is read as
// bart.read_fill reads it: what stands between the line's beginning, written back unchanged, and the first two words
// that followed the gap.

import {
  cell, clearResult, fillDefaults, firstAnswer, guarded, idsTensor, listed, loadModel, painted, plural, quoted, rows,
  showError, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);

let vocabulary = null; // word -> id, made once from meta.json's itos

// The reader's line -> {src, before, after, unknown} (ids) or {error: what was expected and what came}
function check(text, info) {
  const example = "for example “I pray you, sir, ___ me your hand.”";
  if (text.trim() === "") {
    return { error: `The line is empty: type a line with one gap, written ___ (three underscores) or [MASK], ${example}` };
  }
  const gaps = text.match(new RegExp(info.blank_pattern, "giu")) ?? [];
  if (gaps.length === 0) {
    const under = text.match(/_+/u);
    return { error: "The line has no gap: write ___ (three underscores) or [MASK] where words are missing" +
      (under ? `; “${under[0]}” has ${plural(under[0].length, "underscore")}, and a gap needs three.` : ".") };
  }
  if (gaps.length > 1) {
    return { error: `The line has ${gaps.length} gaps (${listed(gaps.map((g) => `“${g}”`))}); this page mends one. ` +
      "Keep one and write words in place of the others." };
  }
  const word = new RegExp(info.word_pattern, "gu");
  const [before, after] = text.split(new RegExp(info.blank_pattern, "iu"))
    .map((piece) => piece.toLowerCase().match(word) ?? []);
  const around = [...before, ...after];
  if (!around.some((w) => /^'?[a-z]/u.test(w))) { // a word, not a mark (a lone apostrophe is a mark)
    return { error: (around.length === 0 ? "The line is only the gap" : `Besides the gap the line has only ` +
      `${listed(around.map(quoted))}`) + ": the model mends a line from the words around the gap, so give it some." };
  }
  if (around.length > info.most) {
    return { error: `The line has ${around.length} words and marks besides the gap, more than the ${info.most} the ` +
      `model mends (it learned lines of ${info.most + 1}). Shorten it by ${around.length - info.most}.` };
  }
  vocabulary ??= new Map(info.itos.map((w, i) => [w, i]));
  const id = (w) => vocabulary.get(w) ?? info.specials.unk;
  const [b, a] = [before.map(id), after.map(id)];
  return { src: [...b, info.specials.mask, ...a, info.specials.sep], before: b, after: a,
    unknown: [...new Set(around.filter((w) => !vocabulary.has(w)))] };
}

// logits (V) -> log-probabilities (V), in doubles
function logSoftmax(logits) {
  let most = -Infinity;
  for (const v of logits) most = Math.max(most, v);
  let sum = 0;
  for (const v of logits) sum += Math.exp(v - most);
  const norm = most + Math.log(sum);
  return Float64Array.from(logits, (v) => v - norm);
}

// The `k` best of the hypotheses' extensions: scores (n arrays of V) -> [{from, token, logp}], best first; a tie
// goes to the lower index of the flattened (n * V), as the build's search_onnx (numpy's stable sort) breaks it.
// decoding.beam_candidates keeps torch.topk's order, which on an exact tie is not fixed: the build refuses a
// recorded line whose search has two candidates within 1e-4 of each other, so the two agree on every one of them
function best(scores, k) {
  const found = []; // kept sorted, best first, at most k long
  scores.forEach((row, from) => row.forEach((logp, token) => {
    if (found.length === k && logp <= found[k - 1].logp) return;
    let at = found.length;
    while (at > 0 && found[at - 1].logp < logp) at -= 1;
    found.splice(at, 0, { from, token, logp });
    if (found.length > k) found.pop();
  }));
  return found;
}

// What the model wrote where the gap was (bart.read_fill), or null when it changed the beginning or the words after
// the gap never came back. written: its line without [CLS] and [SEP]
function readFill(written, before, after, anchor) {
  if (before.some((id, k) => written[k] !== id)) return null;
  const next = after.slice(0, anchor);
  if (next.length === 0) return written.slice(before.length);
  for (let end = before.length; end + next.length <= written.length; end++) {
    if (next.every((id, k) => written[end + k] === id)) return written.slice(before.length, end);
  }
  return null;
}

let model = null;
let latest = 0; // the newest request: a search still running when a newer one starts stops at its next step

// The beam search (decoding.beam_candidates), step by step; `onStep(step, alive)` after each step
async function search(s, beam, onStep) {
  const { ort, session, info } = model;
  const src = idsTensor(ort, s.src);
  let alive = [{ ids: [info.specials.cls], logp: 0 }];
  const finished = [];
  for (let step = 0; step < info.max_new_tokens; step++) {
    const scores = [];
    for (const h of alive) {
      const out = await session.run({ src, tgt: idsTensor(ort, h.ids) }); // logits (1, T, V)
      const [, T] = out.logits.dims;
      scores.push(logSoftmax(rows(out.logits, 0)[T - 1]).map((v) => v + h.logp));
    }
    const grown = [];
    for (const c of best(scores, beam)) {
      const ids = [...alive[c.from].ids, c.token];
      if (c.token === info.specials.sep) {
        finished.push({ ids, logp: c.logp, rank: c.logp / (ids.length - 1) ** info.length_penalty });
      } else grown.push({ ids, logp: c.logp });
    }
    alive = grown;
    if (await onStep(step + 1, alive) === false) return null; // a newer request came
    if (grown.length === 0 || finished.length >= beam) break;
  }
  if (finished.length === 0) { // nothing wrote [SEP] in time: rank what is still growing
    for (const h of alive) finished.push({ ...h, rank: h.logp / (h.ids.length - 1) ** info.length_penalty });
  }
  return finished.map((h, order) => ({ ...h, order })).sort((x, y) => y.rank - x.rank || x.order - y.order);
}

// One candidate in the reader's line: the reader's words before the gap, the fill marked, the reader's words after
// (what the model wrote after the fill may differ from them past the first `anchor` words: #mend-written shows it)
function candidateLine(c, s, info) {
  const words = (ids) => ids.map((i) => info.itos[i]).join(" ");
  const line = cell("td", "", { class: "mend-line" });
  if (c.fill === null) {
    line.append(cell("span", words(c.written)), " ", cell("em", "(it changed the words around the gap)"));
    return line;
  }
  line.append(words(s.before), s.before.length ? " " : "",
    cell("mark", c.fill.length ? words(c.fill) : "(nothing)"), s.after.length ? " " : "", words(s.after));
  return line;
}

function showCandidates(found, s, info) {
  $("mend-candidates").tBodies[0].replaceChildren(...found.map((c, k) => {
    const tr = cell("tr", "", { "data-ids": c.ids.join(" "), "data-logp": String(c.logp), "data-rank": String(c.rank),
      "data-fill": c.fill === null ? "" : c.fill.map((i) => info.itos[i]).join(" ") });
    tr.append(cell("th", String(k + 1), { scope: "row" }), candidateLine(c, s, info),
      cell("td", c.fill === null ? "–" : String(c.fill.length)), cell("td", c.logp.toFixed(2)),
      cell("td", c.rank.toFixed(3)));
    return tr;
  }));
}

async function mend() {
  if (model === null) return;
  const { info } = model;
  const request = ++latest; // taken first, so that a bad line also stops a search still running
  const s = check($("mend-text").value, info);
  if (showError($("mend-error"), $("mend-text"), s.error)) {
    clearResult($("mend-candidates").tBodies[0], $("mend-unknown"), $("mend-written"), $("mend-status"),
      $("mend-progress"));
    return;
  }
  const beam = Number($("mend-beam").value);
  const start = performance.now();
  clearResult($("mend-candidates").tBodies[0], $("mend-written"));
  const unknown = s.unknown.length === 0 ? "" : "Not in the model's vocabulary, so it reads [UNK] in their place: " +
    `${listed(s.unknown.map(quoted))}.`;
  $("mend-unknown").textContent = unknown;
  $("mend-status").textContent = ""; // the live region is written once, when the search is done
  $("mend-progress").textContent = `Searching with a beam of ${beam}…`;
  const found = await search(s, beam, async (step, alive) => {
    if (request !== latest) return false;
    $("mend-progress").textContent = `Step ${step}: ${plural(alive.length, "hypothesis", "hypotheses")} still growing.`;
    await painted();
    return request === latest;
  });
  if (found === null || request !== latest) return;
  firstAnswer("mend_line", start);
  $("mend-progress").textContent = "";
  for (const c of found) {
    const written = c.ids.slice(1, c.ids.at(-1) === info.specials.sep ? -1 : undefined);
    Object.assign(c, { written, fill: readFill(written, s.before, s.after, info.anchor) });
  }
  showCandidates(found, s, info);
  const top = found[0];
  $("mend-written").textContent = top.written.map((i) => info.itos[i]).join(" ");
  const fill = top.fill === null ? "it changed the words around the gap"
    : `the gap holds ${top.fill.length ? `“${top.fill.map((i) => info.itos[i]).join(" ")}”` : "nothing"} ` +
      `(${plural(top.fill.length, "token")})`;
  $("mend-status").textContent = `${plural(found.length, "candidate")} from a beam of ${beam}, in ` +
    `${((performance.now() - start) / 1000).toFixed(1)} s. The best: ${fill}, log-probability ${top.logp.toFixed(2)}` +
    ` over ${plural(top.ids.length - 1, "written token")}.` + (unknown ? ` ${unknown}` : "");
}

const run = () => guarded("mend line: mending the line", $("mend-status"), mend);

async function main() {
  await fillDefaults("mend_line"); // the form's starting values, which the build's answers are for
  model = await loadModel("mend_line", $("mend-status"));
  $("mend-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  await run();
}

startPage("mend line", $("mend-status"), main);
