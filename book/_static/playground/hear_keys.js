// Hear the keys: chapter 19's VioLA speaks the keys the reader types, the codec turns its codes into sound, and a
// Goertzel decoder that learned nothing reads the sound back.
//
// Two files (tools/playground_build/hear_keys.py). models/hear_keys_viola_step.onnx is the touch-tone VioLA, a
// tl.DecoderOnlyLM of 3 layers, exported with a KV cache as the language-model page's: the page feeds
// <bos> <synthesise> keys <sep> once, then each code it chooses, 200 of them, interleaved frame by frame (codebook 1
// of frame 1, codebook 2 of frame 1, ...), as transformer_lib.viola.synthesise writes. Each position's code is
// chosen among its own codebook's 64 codes alone: the likeliest at temperature 0, otherwise drawn from the
// softmax of their logits over the temperature, with the next number of the pages' seeded generator (playground.js's
// mulberry32) as the inverse of the cumulative distribution: synthesise's `uniforms`, so a seed writes PyTorch's
// codes. models/hear_keys_codec.onnx turns the (1, 100, 2) codes into one second of sound at 4 kHz. The page reads
// it back as transformer_lib.speech.dtmf_decode does, draws its spectrogram as the chapter does (torch.stft,
// 128-sample Hann windows every 32 samples), and plays it with Web Audio.

import {
  CachedDecoder, argmax, clearResult, fillDefaults, firstAnswer, generator, guarded, listed, loadModel, painted,
  startPage,
} from "./playground.js";

const $ = (id) => document.getElementById(id);
const VIOLA = "hear_keys_viola", CODEC = "hear_keys_codec"; // meta.json's keys

let viola = null, codec = null; // {ort, session, info} each
let running = false;
let again = false; // a request that came while the model was speaking: answered when it is done
let clip = null; // the last clip spoken: {keys, waveform (Float32Array), read}

// The reader's settings -> {keys, temperature, seed}, or {error, field}
function settings() {
  const info = viola.info;
  const keys = $("hear-keys").value.replace(/\s+/g, "");
  const temperature = Number($("hear-temperature").value);
  const seedText = $("hear-seed").value.trim(), seed = Number(seedText);
  if (keys === "") {
    return { field: "hear-keys", error: `There are no keys to speak: type ${info.min_keys} to ${info.max_keys} of ` +
      `the keypad's ${info.keys.length} keys, such as “2026”, or press an example.` };
  }
  const unknown = [...new Set(keys)].filter((c) => !info.keys.includes(c));
  if (unknown.length) {
    return { field: "hear-keys", error: `${listed(unknown.map((c) => `“${c}”`))} ${unknown.length === 1 ? "is" : "are"} ` +
      `not on the keypad: the model speaks only its ${info.keys.length} keys, ${listed([...info.keys])}.` };
  }
  const n = [...keys].length;
  if (n > info.max_keys) {
    return { field: "hear-keys", error: `${n} keys are more than the ${info.max_keys} the model was trained to speak ` +
      `in its one second (its training clips held 3 to ${info.max_keys}). Remove ${n - info.max_keys}.` };
  }
  if (!info.temperatures.includes(temperature)) {
    return { field: "hear-temperature", error: `The temperature must be one of ${listed(info.temperatures.map(String))}, ` +
      `got “${$("hear-temperature").value}”.` };
  }
  if (seedText === "") {
    return { field: "hear-seed", error: "The seed is empty or not a number: type a whole number from 0 to 4294967295." };
  }
  if (!Number.isInteger(seed) || seed < 0 || seed > 4294967295) {
    return { field: "hear-seed", error: `The seed must be a whole number from 0 to 4294967295, got “${seedText}”.` };
  }
  return { keys, temperature, seed };
}

// Draw one code of the codebook `book` from the step's logits: the likeliest at temperature 0, otherwise the first
// code whose cumulative probability exceeds the generator's next number (synthesise's inverse cumulative
// distribution), the sums taken first to last as there
function chooseCode(logits, book, temperature, random) {
  const info = viola.info, start = info.first_code + book * info.codes;
  const scores = Array.from(logits.subarray(start, start + info.codes)); // (codes,)
  if (temperature === 0) return start + argmax(scores);
  const top = Math.max(...scores);
  const scaled = scores.map((s) => Math.exp((s - top) / temperature));
  const sum = scaled.reduce((a, b) => a + b, 0);
  const u = random();
  let total = 0;
  for (let i = 0; i < scaled.length; i++) {
    total += scaled[i] / sum;
    if (u < total) return start + i;
  }
  return start + scaled.findLastIndex((p) => p > 0); // u beyond the sum's rounding: the last possible code
}

// VioLA writes the clip's codes: the prompt once, then frames x codebooks codes -> the ids written
async function writeCodes({ keys, temperature, seed }) {
  const info = viola.info;
  const decoder = new CachedDecoder(viola);
  const random = generator(seed);
  const prompt = [info.bos, info.synthesise, ...[...keys].map((c) => info.first_key + info.keys.indexOf(c)), info.sep];
  const total = info.frames * info.codebooks, written = [];
  let fresh = prompt;
  for (let position = 0; position < total; position++) {
    const code = chooseCode(await decoder.feed(fresh), position % info.codebooks, temperature, random);
    written.push(code);
    fresh = [code];
    if (position % 20 === 19) {
      $("hear-progress").value = position + 1;
      await painted(); // the bar is seen moving
    }
  }
  $("hear-progress").value = total;
  return { written, fed: decoder.fed };
}

// The ids written -> the codes (frames, codebooks), as SoundVocabulary.codes_of
function codesOf(written) {
  const info = viola.info;
  return Array.from({ length: info.frames }, (_, f) => Array.from({ length: info.codebooks },
    (_, q) => written[f * info.codebooks + q] - info.first_code - q * info.codes));
}

// The codec's decoder: codes (frames, codebooks) -> the waveform (Float32Array of frames x hop samples)
async function speak(codes) {
  const { ort, session, info } = codec;
  const flat = BigInt64Array.from(codes.flat(), BigInt);
  const out = await session.run({ codes: new ort.Tensor("int64", flat, [1, info.frames, info.codebooks]) });
  return out.samples.data; // (1, T) -> (T,)
}

// transformer_lib.speech.dtmf_decode with the build's settings: frames of `frame` samples every `hop`, each one's
// power at the seven tones; a frame holds a key when the strongest row and column tones stand out of what they leave
// of the frame's energy (threshold) and of their runner-up (dominance); consecutive frames that hold keys make one
// press, read as its most frequent key (of a tie, the one heard first, as speech.presses), kept when it lasts
// min_frames frames or more
function readKeys(wave) {
  const info = codec.info, { frame, hop, threshold, dominance, min_frames: minFrames } = info.goertzel;
  const tones = [...info.row_tones, ...info.column_tones];
  const count = Math.floor((wave.length - frame) / hop) + 1;
  const keys = [];
  for (let f = 0; f < count; f++) {
    const x = wave.subarray(f * hop, f * hop + frame);
    const power = tones.map((tone) => {
      const w = (2 * Math.PI * tone) / info.sampling_rate;
      let re = 0, im = 0;
      for (let n = 0; n < frame; n++) { re += x[n] * Math.cos(w * n); im += x[n] * Math.sin(w * n); }
      return re * re + im * im;
    });
    const best = (group) => { // [strongest power, its index, runner-up's power]
      const order = group.map((p, i) => i).sort((a, b) => group[b] - group[a] || a - b);
      return [group[order[0]], order[0], group[order[1]]];
    };
    const [row, r, row2] = best(power.slice(0, 4)), [col, c, col2] = best(power.slice(4));
    const energy = x.reduce((s, v) => s + v * v, 0);
    const rest = Math.max(energy - (2 * (row + col)) / frame, 1e-3 * energy + 1e-20);
    const holds = row > threshold * rest && col > threshold * rest && row > dominance * row2 && col > dominance * col2;
    keys.push(holds ? r * 3 + c : -1);
  }
  const pressed = [];
  let run = [];
  for (const k of [...keys, -1]) { // a closing -1 ends the last press
    if (k >= 0) { run.push(k); continue; }
    if (run.length >= minFrames) {
      const counts = new Map(); // in the order the keys were heard
      for (const key of run) counts.set(key, (counts.get(key) ?? 0) + 1);
      let most = null;
      for (const [key, n] of counts) if (most === null || n > counts.get(most)) most = key; // a tie: the first
      pressed.push(info.keypad[most]);
    }
    run = [];
  }
  return pressed.join("");
}

// torch.stft(wave, n_fft, hop, window=torch.hann_window(n_fft), return_complex=True).abs(): centred frames, the clip
// padded by reflection, a periodic Hann window -> bins (n_fft / 2 + 1) rows of frames (1 + T / hop) magnitudes
export function spectrogram(wave, nFft, hop) {
  const half = nFft / 2, T = wave.length, frames = 1 + Math.floor(T / hop), bins = half + 1;
  const at = (j) => wave[j < 0 ? -j : j >= T ? 2 * (T - 1) - j : j]; // reflect
  const window = Array.from({ length: nFft }, (_, n) => 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / nFft));
  const cos = Array.from({ length: nFft }, (_, n) => Math.cos((2 * Math.PI * n) / nFft));
  const sin = Array.from({ length: nFft }, (_, n) => Math.sin((2 * Math.PI * n) / nFft));
  const out = Array.from({ length: bins }, () => new Float64Array(frames));
  const x = new Float64Array(nFft);
  for (let t = 0; t < frames; t++) {
    for (let n = 0; n < nFft; n++) x[n] = window[n] * at(t * hop + n - half);
    for (let k = 0; k < bins; k++) {
      let re = 0, im = 0;
      for (let n = 0; n < nFft; n++) { const i = (k * n) % nFft; re += x[n] * cos[i]; im -= x[n] * sin[i]; }
      out[k][t] = Math.hypot(re, im);
    }
  }
  return out;
}

// A colour for a level from 0 (quiet) to 1 (loud): dark blue through teal to yellow
function colour(level) {
  const stops = [[20, 20, 60], [30, 110, 140], [90, 180, 110], [250, 230, 80]];
  const x = Math.min(Math.max(level, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2);
  const a = stops[i], b = stops[i + 1], t = x - i;
  return a.map((v, k) => Math.round(v + (b[k] - v) * t));
}

// Draw the spectrogram on the canvas: time left to right, frequency bottom to top, in decibels below its loudest
// cell, down to 60 dB below it (the chapter's figures draw absolute decibels in another colour map)
function drawSpectrogram(magnitude) {
  const canvas = $("hear-spectrogram"), bins = magnitude.length, frames = magnitude[0].length;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(frames, bins);
  const loudest = Math.max(...magnitude.map((row) => Math.max(...row)));
  for (let k = 0; k < bins; k++) {
    for (let t = 0; t < frames; t++) {
      const db = 20 * Math.log10(magnitude[k][t] / loudest + 1e-12);
      const [r, g, b] = colour(1 + db / 60);
      const p = ((bins - 1 - k) * frames + t) * 4; // the highest frequency on the top row
      image.data.set([r, g, b, 255], p);
    }
  }
  const small = Object.assign(document.createElement("canvas"), { width: frames, height: bins }); // never shown
  small.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(small, 0, 0, canvas.width, canvas.height);
}

// When the clip's sound starts, for the spectrogram's description: the first Goertzel-sized frame whose energy passes
// a tenth of the loudest frame's -> "its sound starts at about 0.37 s", or that there is none
function onset(wave) {
  const info = codec.info, { frame, hop } = info.goertzel;
  const energies = [];
  for (let s = 0; s + frame <= wave.length; s += hop) energies.push(wave.subarray(s, s + frame).reduce((a, v) => a + v * v, 0));
  const loud = Math.max(...energies), first = energies.findIndex((e) => e > loud / 10);
  return loud > 0 && first >= 0 ? `its sound starts at about ${((first * hop) / info.sampling_rate).toFixed(2)} s`
    : "it holds no sound";
}

// Keys as a screen reader should say them, one by one: "2026" -> "2 0 2 6" (not "two thousand and twenty-six")
const spaced = (keys) => [...keys].join(" ");

async function answer() {
  const s = settings();
  for (const id of ["hear-keys", "hear-temperature", "hear-seed"]) $(id).setAttribute("aria-invalid", String(s.field === id));
  $("hear-error").textContent = s.error ?? "";
  if (s.error) {
    clip = null;
    window.hearKeys = null;
    $("hear-progress").value = 0;
    clearResult($("hear-read"), $("hear-verdict"), $("hear-status"), $("hear-codes"));
    $("hear-judged").hidden = true;
    $("hear-spectrogram").getContext("2d").clearRect(0, 0, $("hear-spectrogram").width, $("hear-spectrogram").height);
    $("hear-spectrogram").setAttribute("aria-label", "No spectrogram yet: nothing has been spoken.");
    return;
  }
  const start = performance.now();
  $("hear-progress").value = 0;
  $("hear-status").textContent = ""; // emptied, so that the same result said again is announced again
  const { written, fed } = await writeCodes(s);
  const codes = codesOf(written);
  const waveform = await speak(codes);
  const read = readKeys(waveform);
  const magnitude = spectrogram(waveform, codec.info.stft.n_fft, codec.info.stft.hop);
  drawSpectrogram(magnitude);
  clip = { keys: s.keys, waveform, read };
  window.hearKeys = { ids: written, codes, waveform: Array.from(waveform), read, spectrogram: magnitude.map((r) => Array.from(r)) };
  for (const key of [VIOLA, CODEC]) firstAnswer(key, start);
  window.playgroundTimings[VIOLA].last_run = { fed, total_ms: performance.now() - start };
  const right = read === s.keys;
  const how = s.temperature === 0 ? "greedily (temperature 0)" : `at temperature ${s.temperature}, seed ${s.seed}`;
  $("hear-read").textContent = read === "" ? "nothing" : `“${read}”`;
  $("hear-read").dataset.read = read;
  $("hear-verdict").textContent = right ? "right" : "wrong";
  $("hear-judged").hidden = false;
  $("hear-codes").textContent = codes.slice(0, 10).map((c) => `(${c.join(", ")})`).join(" ") + " …";
  $("hear-codes").dataset.ids = JSON.stringify(written);
  $("hear-spectrogram").setAttribute("aria-label", `Spectrogram of the second VioLA spoke for the keys ${spaced(s.keys)}, ` +
    `${how}: frequency up to ${codec.info.sampling_rate / 2} Hz against time; ${onset(waveform)}, ` +
    `and the Goertzel decoder reads ${read === "" ? "no key" : spaced(read)} in it.`);
  $("hear-status").textContent = `You typed ${spaced(s.keys)}; VioLA spoke it ${how}, and the Goertzel decoder heard ` +
    `${read === "" ? "no key" : spaced(read)}: ${right ? "right" : "wrong"}.`;
}

// The clip at twice its rate: 8,000 samples a second is the lowest rate every browser's Web Audio takes (some refuse
// a buffer at the codec's 4,000). The new samples, halfway between the old, are windowed-sinc interpolation: 32
// taps of sin(pi t) / (pi t) at t = j - 1/2 under a Blackman window, summing to 1. It keeps the keypad's tones (all
// under 1.7 kHz) at their level and adds next to nothing above 2 kHz, where drawing straight lines between the
// samples would add mirror tones at 4,000 Hz minus each tone
const HALF_TAPS = 16;
const TAPS = (() => {
  const taps = Array.from({ length: 2 * HALF_TAPS }, (_, i) => {
    const t = i - HALF_TAPS + 0.5, k = i + 0.5, n = 2 * HALF_TAPS; // the window at k of 0..n, its peak at t = 0
    const window = 0.42 - 0.5 * Math.cos((2 * Math.PI * k) / n) + 0.08 * Math.cos((4 * Math.PI * k) / n);
    return (Math.sin(Math.PI * t) / (Math.PI * t)) * window;
  });
  const sum = taps.reduce((a, b) => a + b, 0);
  return taps.map((h) => h / sum);
})();

function doubled(wave) {
  const out = new Float32Array(2 * wave.length);
  for (let i = 0; i < wave.length; i++) {
    out[2 * i] = wave[i];
    let between = 0; // halfway from sample i to sample i + 1: the samples i - 15 .. i + 16, outside the clip 0
    for (let j = 0; j < TAPS.length; j++) {
      const at = i - HALF_TAPS + 1 + j;
      if (at >= 0 && at < wave.length) between += TAPS[j] * wave[at];
    }
    out[2 * i + 1] = between;
  }
  return out.map((v) => Math.max(-1, Math.min(1, v)));
}

// Play the last clip with Web Audio, at 8,000 samples a second (the browser resamples it to its own rate)
async function play() {
  if (clip === null) {
    $("hear-status").textContent = "There is no sound to play yet: speak some keys first.";
    return;
  }
  const rate = 2 * codec.info.sampling_rate;
  const samples = doubled(clip.waveform);
  const context = new AudioContext();
  const buffer = context.createBuffer(1, samples.length, rate);
  buffer.copyToChannel(samples, 0);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  source.addEventListener("ended", () => context.close());
  source.start();
  window.hearKeysPlayed = { sampleRate: buffer.sampleRate, length: buffer.length, keys: clip.keys };
  $("hear-status").textContent = `Playing the second VioLA spoke for ${spaced(clip.keys)} (${buffer.length} samples at ` +
    `${rate} a second: the codec's ${codec.info.sampling_rate}, doubled).`;
}

async function onSubmit(event) {
  event?.preventDefault();
  if (viola === null || codec === null) return;
  if (running) { // the buttons stay enabled, so focus stays put: the request is answered once this one is done
    again = true;
    return;
  }
  running = true;
  $("hear-playground").setAttribute("aria-busy", "true"); // assistive technology waits for the result
  do {
    again = false;
    await guarded("hear keys: speaking", $("hear-status"), answer);
  } while (again);
  $("hear-playground").setAttribute("aria-busy", "false");
  running = false;
}

async function main() {
  await fillDefaults("hear_keys"); // the form's starting values, whose answers the build recorded
  viola = await loadModel(VIOLA, $("hear-status"));
  codec = await loadModel(CODEC, $("hear-status"));
  $("hear-progress").max = viola.info.frames * viola.info.codebooks;
  $("hear-form").addEventListener("submit", onSubmit);
  $("hear-play").addEventListener("click", () => guarded("hear keys: playing", $("hear-status"), play));
  for (const button of document.querySelectorAll("#hear-examples button")) {
    button.addEventListener("click", () => {
      $("hear-keys").value = button.dataset.keys;
      onSubmit();
    });
  }
  await onSubmit(); // the default keys, so the page opens with a clip
}

startPage("hear_keys", $("hear-status"), main);
