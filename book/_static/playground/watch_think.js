// Watch it think: chapter 21's addition models write their answers to the reader's problem, a program checks each
// step and the sum, and several samples of one model show the vote.
//
// The three files (models/think_{scratchpad,start,direct}_step*.onnx, tools/playground_build/watch_think.py) are
// tl.reasoning's model, 3 layers, 128 positions, with three sets of weights: trained 600 steps on worked steps, 400
// steps on worked steps (the model GRPO and the chapter's test-time compute start from), and 600 steps on the sum
// alone. Each is a step model with a KV cache, decoded as the language-model page's: <bos> and "a+b=" once, then each
// character chosen, until the end mark "." or the budget reasoning.answer_budget gives the problem.
// Greedy, the likeliest character each step (reasoning.write at temperature 0). Sampled, at temperature 1, each
// character the first whose cumulative probability exceeds the next number of the pages' seeded generator, one
// generator for all the samples (the build's page_sample, number for number). The verdicts are tl.arithmetic's
// (final_answer, is_right, steps_right) and the vote tl.evaluation.majority_vote's.

import {
  CachedDecoder, cell, clearResult, fillDefaults, firstAnswer, generator, greedy, guarded, loadModel, painted,
  showError, startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const KEYS = ["think_scratchpad", "think_start", "think_direct"]; // meta.json's keys: the greedy table's rows
const END = "."; // arithmetic.END: an answer ends there
const SEED_MAX = 4294967295;

// arithmetic.scratchpad: one step per column from the right, "x+y+carry=sum", then "=" and the sum, then END. `a`
// and `b` are strings of digits; the shorter counts as 0 in the columns it lacks
function scratchpad(a, b) {
  const x = [...a].reverse(), y = [...b].reverse(), steps = [];
  let carry = 0;
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const dx = Number(x[i] ?? 0), dy = Number(y[i] ?? 0), total = dx + dy + carry;
    steps.push(`${dx}+${dy}+${carry}=${total}`);
    carry = Math.floor(total / 10);
  }
  return `${steps.join(";")};=${BigInt(a) + BigInt(b)}${END}`;
}

// reasoning.answer_budget: the longest right answer for the numbers' lengths, plus 4
function budget(problem, style) {
  const digits = Math.max(problem.a.length, problem.b.length), largest = "9".repeat(digits);
  const longest = style === "direct" ? `${2n * BigInt(largest)}${END}` : scratchpad(largest, largest);
  return longest.length + 4;
}

// arithmetic.final_answer: the digits after the last "=" (the whole answer when it has none), up to END, as a whole
// number of any length (a BigInt, as Python's int); null when they are no number or END never comes
function finalAnswer(text) {
  if (!text.includes(END)) return null;
  const body = text.slice(0, text.indexOf(END)), digits = body.slice(body.lastIndexOf("=") + 1);
  return /^[0-9]+$/.test(digits) ? BigInt(digits) : null;
}

// The program's verdict on one answer: the sum read, right or not, every step right (arithmetic.steps_right)
function verdict(problem, text) {
  const sum = finalAnswer(text);
  const steps = text.includes(END) && text.slice(0, text.indexOf(END) + 1) === scratchpad(problem.a, problem.b);
  return { sum, right: sum === problem.sum, steps };
}

// tl.evaluation.majority_vote over the sums: the one read most often, null left out, a tie to the first given
function majorityVote(sums) {
  const counts = new Map();
  for (const s of sums) if (s !== null) counts.set(s, (counts.get(s) ?? 0) + 1);
  if (counts.size === 0) return null;
  const most = Math.max(...counts.values());
  return sums.find((s) => s !== null && counts.get(s) === most);
}

// The reader's problem -> {problem: {a, b, text, sum}} or {error: what was expected and what came}. Spaces are
// dropped and one "=" at the end is allowed; the numbers are whole, without leading zeros, of 1 to max_digits digits
function checkProblem(raw, info) {
  const example = "two whole numbers joined by +, such as 478+356";
  let text = raw.replace(/\s+/g, "");
  if (text === "") return { error: `The field is empty: type ${example}.` };
  if (text.endsWith("=")) text = text.slice(0, -1);
  const strange = [...new Set(text.replace(/[0-9+]/g, ""))].map((c) => `“${c}”`);
  if (strange.length) {
    return { error: `The models read digits and one + only (and an = at the end): ${strange.join(", ")} ` +
      `${strange.length === 1 ? "is" : "are"} not among them. Type ${example}.` };
  }
  const parts = text.split("+");
  if (parts.length !== 2) {
    return { error: parts.length === 1 ? `“${text}” has no +: type ${example}.`
      : `“${text}” has ${parts.length - 1} plus signs; the models add two numbers: type ${example}.` };
  }
  const [a, b] = parts;
  if (a === "" || b === "") return { error: `The ${a === "" ? "first" : "second"} number is missing: type ${example}.` };
  for (const n of [a, b]) {
    if (n.length > 1 && n.startsWith("0")) {
      return { error: `“${n}” begins with 0: the models never saw a number written so. Type it without, ` +
        `as ${n.replace(/^0+(?=.)/, "")}.` };
    }
    if (n.length > info.max_digits) {
      return { error: `“${n}” has ${n.length} digits; the page takes numbers of at most ${info.max_digits}, so ` +
        `that the problem and the longest worked answer always fit in the models' ${info.max_len} positions.` };
    }
  }
  return { problem: { a, b, text: `${a}+${b}`, sum: BigInt(a) + BigInt(b) } };
}

// The seed field -> a whole number from 0 to 2^32 - 1, or an error. A number field gives "" for what it cannot read
// as a number ("1e"): `unreadable` says so, so that the message does not quote an empty field
function checkSeed(raw, unreadable = false) {
  if (unreadable) return { error: `The seed must be a whole number from 0 to ${SEED_MAX}; the field holds no number.` };
  const text = raw.trim();
  if (!/^[0-9]+$/.test(text) || Number(text) > SEED_MAX) {
    return { error: `The seed must be a whole number from 0 to ${SEED_MAX}, got “${raw}”.` };
  }
  return { seed: Number(text) };
}

const promptIds = (info, problem) => [info.specials.bos, ...[...`${problem.text}=`].map((c) => info.itos.indexOf(c))];
// The ids -> the text, as CharTokenizer.decode(ids, stop_at_eos=False): the special tokens dropped
const textOf = (info, ids) => ids.filter((id) => id >= info.specials.count).map((id) => info.itos[id]).join("");

// One character at temperature 1: the first whose cumulative probability exceeds u, the sums first to last
function sampleOne(logits, u) {
  const scores = Array.from(logits), top = Math.max(...scores);
  const scaled = scores.map((s) => Math.exp(s - top)), sum = scaled.reduce((x, y) => x + y, 0);
  let total = 0;
  for (let i = 0; i < scaled.length; i++) {
    total += scaled[i] / sum;
    if (u < total) return i;
  }
  return scaled.findLastIndex((p) => p > 0); // u beyond the sum's rounding: the last possible character
}

// `count` sampled answers of one model, each with a fresh cache, one generator for all -> {answers (ids), fed}
async function sampled(model, ids, limit, count, seed, each) {
  const random = generator(seed), answers = [], decoder = new CachedDecoder(model);
  for (let s = 0; s < count; s++) {
    decoder.reset();
    const written = [];
    let fresh = ids;
    while (written.length < limit) {
      const next = sampleOne(await decoder.feed(fresh), random());
      written.push(next);
      if (next === model.info.end) break;
      fresh = [next];
    }
    answers.push(written);
    await each(answers);
  }
  return { answers, fed: decoder.fed };
}

// The steps of an answer against the right ones, for the greedy table: "3 of 3 steps right", or the first wrong one
function stepsSaid(problem, text, style) {
  if (style === "direct") return "none: it writes the sum alone";
  const right = scratchpad(problem.a, problem.b).split(";").slice(0, -1);
  const body = text.includes(END) ? text.slice(0, text.indexOf(END)) : text;
  const wrote = body.split(";").filter((s) => !s.startsWith("="));
  const wrong = right.findIndex((step, i) => wrote[i] !== step);
  if (wrong < 0 && wrote.length === right.length) return `${right.length} of ${right.length} right`;
  if (wrong < 0) return `${right.length} right, then ${wrote.length - right.length} more than the columns`;
  return wrote[wrong] === undefined ? `${wrong} of ${right.length}: stops before column ${wrong + 1}`
    : `column ${wrong + 1} wrong: wrote ${wrote[wrong]}, the right step is ${right[wrong]}`;
}

const sumSaid = (v) => (v.sum === null ? "no sum (cut short or unreadable)" : String(v.sum));
const rightSaid = (v) => (v.sum === null ? "no sum" : v.right ? "right" : "wrong");

let models = null; // key -> {ort, session, info}
let running = false;
let again = false; // asked again while a run was going: answer the form as it is once that run ends

// One row of the greedy table as the model writes: its text, the sum read, the verdict and the steps
function showGreedy(key, problem, written, done) {
  const { info } = models[key];
  const row = $("think-greedy").querySelector(`tr[data-model="${key}"]`);
  const [wroteCell, sumCell, verdictCell, stepsCell] = row.querySelectorAll("td");
  const text = textOf(info, written), v = verdict(problem, text);
  wroteCell.dataset.ids = JSON.stringify(written);
  wroteCell.replaceChildren(cell("code", text));
  if (!done) return;
  sumCell.textContent = sumSaid(v);
  verdictCell.textContent = rightSaid(v);
  stepsCell.textContent = stepsSaid(problem, text, info.style);
}

// The samples' table and the vote's
function showSamples(key, problem, answers) {
  const { info } = models[key];
  const verdicts = answers.map((ids) => verdict(problem, textOf(info, ids)));
  $("think-samples-table").querySelector("tbody").replaceChildren(...answers.map((ids, i) => {
    const v = verdicts[i], row = document.createElement("tr");
    row.dataset.ids = JSON.stringify(ids);
    const wrote = cell("td");
    wrote.append(cell("code", textOf(info, ids)));
    row.append(cell("th", String(i + 1), { scope: "row" }), wrote, cell("td", sumSaid(v)), cell("td", rightSaid(v)),
      cell("td", info.style === "direct" ? "no steps" : v.steps ? "yes" : "no"));
    return row;
  }));
  return verdicts;
}

function showVote(problem, verdicts) {
  const sums = verdicts.map((v) => v.sum), vote = majorityVote(sums), counts = new Map();
  for (const s of sums) if (s !== null) counts.set(s, (counts.get(s) ?? 0) + 1);
  const none = sums.filter((s) => s === null).length;
  const rows = [...counts].map(([sum, n]) => {
    const row = document.createElement("tr");
    row.dataset.sum = String(sum);
    if (sum === vote) row.className = "playground-chosen";
    row.append(cell("th", String(sum), { scope: "row" }), cell("td", String(n)),
      cell("td", sum === problem.sum ? "right" : "wrong"), cell("td", sum === vote ? "the vote" : ""));
    return row;
  });
  if (none) {
    const row = document.createElement("tr");
    row.append(cell("th", "no sum", { scope: "row" }), cell("td", String(none)), cell("td", "left out"), cell("td", ""));
    rows.push(row);
  }
  $("think-vote").querySelector("tbody").replaceChildren(...rows);
  $("think-vote").dataset.vote = vote === null ? "" : String(vote);
  return { vote, votes: vote === null ? 0 : counts.get(vote) };
}

async function think() {
  const info = models[KEYS[0]].info; // the three share the characters, the lengths and the digits allowed
  const c = checkProblem($("think-problem").value, info);
  const s = checkSeed($("think-seed").value, $("think-seed").validity.badInput);
  const field = c.error ? $("think-problem") : $("think-seed"), other = c.error ? $("think-seed") : $("think-problem");
  other.setAttribute("aria-invalid", "false");
  const bad = showError($("think-error"), field, c.error ?? s.error ?? null);
  if (bad) {
    clearResult($("think-prompt"), $("think-status"), $("think-samples-table").querySelector("tbody"),
      $("think-vote").querySelector("tbody"), ...$("think-greedy").querySelectorAll("tbody td"));
    return;
  }
  const { problem } = c, key = $("think-model").value, count = Number($("think-samples").value), seed = s.seed;
  $("think-prompt").textContent = `${problem.text}=`;
  for (const td of $("think-greedy").querySelectorAll("tbody td")) td.replaceChildren();
  clearResult($("think-samples-table").querySelector("tbody"), $("think-vote").querySelector("tbody"));
  const ids = promptIds(info, problem);
  for (const k of KEYS) {
    const start = performance.now(), decoder = new CachedDecoder(models[k]);
    const style = models[k].info.style;
    const written = await greedy(decoder, ids, budget(problem, style), models[k].info.end, async (sofar) => {
      showGreedy(k, problem, sofar, false);
      await painted(); // the answer is seen growing, one character at a time
    });
    showGreedy(k, problem, written, true);
    firstAnswer(k, start);
    window.playgroundTimings[k].last_run = { fed: decoder.fed, total_ms: performance.now() - start };
  }
  const model = models[key];
  $("think-samples-caption").textContent = `${count} ${count === 1 ? "sample" : "samples"} of the ` +
    `${model.info.name} model at temperature 1, seed ${seed}`;
  const start = performance.now();
  const run = await sampled(model, ids, budget(problem, model.info.style), count, seed, async (answers) => {
    showSamples(key, problem, answers);
    await painted();
  });
  window.playgroundTimings[key].last_samples = { fed: run.fed, total_ms: performance.now() - start };
  const verdicts = showSamples(key, problem, run.answers);
  const { vote, votes } = showVote(problem, verdicts);
  const greedyText = (k) => textOf(info, JSON.parse($("think-greedy").querySelector(`tr[data-model="${k}"] td`).dataset.ids));
  const said = KEYS.map((k) => `${models[k].info.name} ${rightSaid(verdict(problem, greedyText(k)))}`);
  const right = verdicts.filter((v) => v.right).length;
  $("think-status").textContent = `${problem.text} = ${problem.sum}. Greedy: ${said.join(", ")}. ` +
    `${count} ${count === 1 ? "sample" : "samples"} of the ${model.info.name} model: ${right} right; the vote: ` +
    (vote === null ? "none, no sample has a sum." : `${vote}, ${votes} of ${count} (${vote === problem.sum ? "right" : "wrong"}).`);
}

async function onSubmit(event) {
  event?.preventDefault();
  if (models === null) return;
  if (running) { // the buttons stay enabled, so focus stays where the reader left it; the newest request runs next
    again = true;
    return;
  }
  running = true;
  do {
    again = false;
    await guarded("watch think: thinking", $("think-status"), think);
  } while (again);
  running = false;
}

async function main() {
  await fillDefaults("watch_think"); // the form's starting values, whose answers the build recorded
  const loaded = {};
  for (const key of KEYS) loaded[key] = await loadModel(key, $("think-status")); // one after the other
  models = loaded;
  $("think-form").addEventListener("submit", onSubmit);
  for (const button of document.querySelectorAll("#think-examples button")) {
    button.addEventListener("click", () => {
      $("think-problem").value = button.dataset.problem;
      onSubmit();
    });
  }
  await onSubmit(); // the page's default problem, so the page opens with answers and a vote
}

startPage("watch think", $("think-status"), main);
