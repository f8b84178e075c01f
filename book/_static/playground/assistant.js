// Three models, one prompt: chapter 17's base, SFT and GRPO models answer the reader's line side by side.
//
// The three files (models/assistant_{base,sft,grpo}_step*.onnx, tools/playground_build/assistant.py) are one
// tl.DecoderOnlyLM, 4 layers, 128 positions: chapter 10's character model with the chat template's three tokens added
// after its vocabulary, with three sets of weights: the base model's (the new rows untrained), after supervised
// fine-tuning, and after GRPO. Each is exported with a KV cache, as the language-model page's, and decoded as
// transformer_lib.chat.sample_answers decodes (playground.js's greedy and CachedDecoder): the prompt
// <|user|> line <|assistant|> once, then each token chosen, the likeliest, until <|end|> or max_answer (8) new tokens.
// The answer is what ChatTokenizer.decode_answer keeps of them: the characters before the first chat token or
// padding, the other specials dropped and <eos> ending it too. The right answer is chat.solve's, by program.

import {
  CachedDecoder, clearResult, fillDefaults, firstAnswer, greedy, guarded, loadModel, painted, showError, shown,
  startPage, unknownCharacters,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const KEYS = ["assistant_base", "assistant_sft", "assistant_grpo"]; // meta.json's keys: the table's rows, in order
const NAMES = { assistant_base: "base", assistant_sft: "SFT", assistant_grpo: "GRPO" }; // as the status says them

// transformer_lib.chat.TASKS: three instructions about one word
const TASKS = {
  reverse: (word) => [...word].reverse().join(""),
  shout: (word) => word.toUpperCase(),
  count: (word) => String([...word].length),
};

// chat.solve: the line is "<task> <word>", split at its first space as str.partition splits it -> the right answer,
// or null where the task is not one of TASKS (as written: "Reverse" is not "reverse") or the word is empty
function solve(line) {
  const space = line.indexOf(" ");
  const task = space < 0 ? line : line.slice(0, space), word = space < 0 ? "" : line.slice(space + 1);
  return Object.hasOwn(TASKS, task) && word !== "" ? TASKS[task](word) : null;
}

// The characters the models know, for the help under the field: runs of letters and digits as ranges (a–z, 1–9),
// the other marks one by one; the line break, which the field cannot hold, is left out
function vocabulary(info) {
  const chars = info.itos.slice(info.specials.count).filter((c) => c !== "\n");
  const ranged = [], marks = [];
  for (const c of chars) {
    const last = ranged.at(-1);
    if (!/[\p{L}\p{N}]/u.test(c)) marks.push(c === " " ? "space" : c);
    else if (last && c.codePointAt(0) === last.to.codePointAt(0) + 1 && /\p{L}/u.test(c) === /\p{L}/u.test(last.to)) last.to = c;
    else ranged.push({ from: c, to: c });
  }
  const runs = ranged.map(({ from, to }) => (from === to ? from : `${from}–${to}`));
  return `${runs.join(", ")}, ${marks.join(" ")}`;
}

// The reader's line -> {ids: <|user|> line <|assistant|>} (ChatTokenizer.encode_chat), or {error: what was expected
// and what came}
function check(line, info) {
  if (line.trim() === "") {
    return { error: "The line is empty: type what the user says, a task and a word such as “reverse night”, " +
      "or press one of the examples." };
  }
  const unknown = unknownCharacters(line, info.itos, info.specials);
  if (unknown.length) {
    return { error: `The models have never seen ${unknown.join(", ")}: they read only the characters of the plays, ` +
      `listed under the field. Remove or replace ${unknown.length === 1 ? "it" : "them"}.` };
  }
  const most = info.max_len - 2 - info.max_answer, length = [...line].length;
  if (length > most) {
    return { error: `The line has ${length} characters, more than the ${most} the models can answer: their ` +
      `${info.max_len} positions hold ${info.chat.tokens[0]}, the line, ${info.chat.tokens[1]} and ` +
      `${info.max_answer} tokens for the answer. Shorten it by ${length - most}.` };
  }
  return { ids: [info.chat.user, ...[...line].map((c) => info.itos.indexOf(c)), info.chat.assistant] };
}

// An id as the table writes it: a character (␣ for a space, ↵ for a line break) or a special token's name
const token = (info, id) => (id < info.itos.length ? shown(info.itos[id]) : info.chat.tokens[id - info.itos.length]);

// The ids a model wrote -> its answer, as ChatTokenizer.decode_answer: up to the first chat token or padding, then
// CharTokenizer.decode, which drops the other specials and stops at <eos>
function answerOf(info, ids) {
  const { pad, eos, count } = info.specials;
  const chars = [];
  for (const id of ids) {
    if (id >= info.itos.length || id === pad || id === eos) break;
    if (id >= count) chars.push(info.itos[id]);
  }
  return chars.join("");
}

const quoted = (text) => `“${text.replaceAll("\n", "↵")}”`;

let models = null; // key -> {ort, session, info}
let running = false;

// One row of the table: the model's answer, the right one, the verdict and the tokens written
function showRow(key, info, written, right, done) {
  const row = $("assistant-answers").querySelector(`tr[data-model="${key}"]`);
  const [answerCell, rightCell, verdictCell, tokensCell] = row.querySelectorAll("td");
  const answer = answerOf(info, written);
  answerCell.dataset.answer = answer;
  answerCell.replaceChildren(Object.assign(document.createElement("code"), { textContent: quoted(answer) }));
  rightCell.textContent = right === null ? "no checker for this line" : quoted(right);
  verdictCell.textContent = !done ? "…" : right === null ? "not checked" : answer === right ? "right" : "wrong";
  tokensCell.dataset.ids = JSON.stringify(written);
  const ended = written.at(-1) === info.chat.end;
  const how = !done ? "writing…" : ended ? `${written.length} tokens, the last ${info.chat.tokens[2]}`
    : `${written.length} tokens, cut there without ${info.chat.tokens[2]}`;
  tokensCell.replaceChildren(Object.assign(document.createElement("code"), {
    textContent: written.map((id) => token(info, id)).join("") }), ` (${how})`);
}

async function ask() {
  const info = models[KEYS[0]].info; // the three share the vocabulary, the template and the lengths
  const line = $("assistant-line").value;
  const c = check(line, info);
  if (showError($("assistant-error"), $("assistant-line"), c.error)) {
    clearResult($("assistant-prompt"), $("assistant-status"), ...$("assistant-answers").querySelectorAll("tbody td"));
    return;
  }
  const right = solve(line);
  $("assistant-prompt").textContent = `${info.chat.tokens[0]}${line}${info.chat.tokens[1]}`;
  for (const td of $("assistant-answers").querySelectorAll("tbody td")) td.replaceChildren();
  const said = [];
  for (const key of KEYS) {
    const start = performance.now();
    const decoder = new CachedDecoder(models[key]);
    const written = await greedy(decoder, c.ids, info.max_answer, info.chat.end, async (sofar) => {
      showRow(key, info, sofar, right, false);
      await painted(); // the answer is seen growing, one token at a time
    });
    showRow(key, info, written, right, true);
    firstAnswer(key, start);
    window.playgroundTimings[key].last_run = { fed: decoder.fed, total_ms: performance.now() - start };
    const answer = answerOf(info, written);
    said.push(`${NAMES[key]} ${quoted(answer)}${right === null ? "" : answer === right ? " (right)" : " (wrong)"}`);
  }
  $("assistant-status").textContent = `${quoted(line)}: ${said.join(", ")}` +
    (right === null ? ". No checker for this line: it is not one of the three tasks." : `. The right answer is ${quoted(right)}.`);
}

async function onSubmit(event) {
  event?.preventDefault();
  if (models === null || running) return; // the buttons stay enabled, so focus stays where the reader left it
  running = true;
  await guarded("assistant: answering", $("assistant-status"), ask);
  running = false;
}

async function main() {
  await fillDefaults("assistant"); // the form's starting value, whose answers the build recorded
  const loaded = {};
  for (const key of KEYS) loaded[key] = await loadModel(key, $("assistant-status")); // one after the other
  models = loaded;
  $("assistant-vocabulary").textContent = vocabulary(models[KEYS[0]].info);
  $("assistant-form").addEventListener("submit", onSubmit);
  for (const button of document.querySelectorAll("#assistant-examples button")) {
    button.addEventListener("click", () => {
      $("assistant-line").value = button.dataset.line;
      onSubmit();
    });
  }
  await onSubmit(); // the page's default line, so the page opens with three answers
}

startPage("assistant", $("assistant-status"), main);
