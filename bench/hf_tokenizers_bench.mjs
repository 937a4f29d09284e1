// Hugging Face tokenizers (the Rust library, through its Node binding: npm `tokenizers`) measured
// the way `kestrel bench-tokenizer` and hf_tokenizers_bench.py measure: MB/s of the corpus's
// UTF-8 bytes, median of repeated calls (at least 5 and --seconds, after a warm-up call).
//
//   npm install tokenizers@0.23.2          (anywhere; set NODE_PATH to its node_modules)
//   node bench/hf_tokenizers_bench.mjs --corpus kjv200k.txt qwen3/tokenizer.json gemma3/tokenizer.json
//
// encode 1T: tok.encode(corpus); encode NT: tok.encodeBatch(lines) (rayon over all cores);
// decode 1T: tok.decode(ids of the corpus); decode NT: tok.decodeBatch(ids of each line).
import { createRequire } from "module";
import fs from "fs";
import os from "os";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");

const args = process.argv.slice(2);
let corpusPath = null, seconds = 2, out = null;
const paths = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--corpus") corpusPath = args[++i];
  else if (args[i] === "--seconds") seconds = Number(args[++i]);
  else if (args[i] === "--out") out = args[++i];
  else paths.push(args[i]);
}
if (!corpusPath || paths.length === 0) {
  console.error("usage: node hf_tokenizers_bench.mjs --corpus FILE [--seconds S] [--out FILE] TOKENIZER_JSON...");
  process.exit(2);
}

async function timeIt(fn) {
  await fn();
  const times = [];
  const start = performance.now();
  while (times.length < 5 || (performance.now() - start) / 1000 < seconds) {
    const t0 = performance.now();
    await fn();
    times.push((performance.now() - t0) / 1000);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)];
}

const raw = fs.readFileSync(corpusPath);
const corpus = raw.toString("utf8");
const lines = corpus.match(/[^\n]*\n|[^\n]+$/g) ?? [];
const mb = raw.length / 1e6;
const record = {
  date: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
  machine: { host: os.hostname(), cpu: os.cpus()[0]?.model ?? "unknown", cores: os.cpus().length },
  command: "node " + process.argv.slice(1).join(" "),
  tokenizers: "npm tokenizers " + require("tokenizers/package.json").version,
  corpus: { source: corpusPath, bytes: raw.length, documents: lines.length },
  results: [],
};
console.log(`corpus: ${corpusPath}, ${mb.toFixed(3)} MB, ${lines.length} lines; ${record.tokenizers}, ${os.cpus().length} cores`);
console.log("tokenizer".padEnd(40), "tokens".padStart(9), "encode 1T MB/s", "encode NT MB/s", "decode 1T MB/s", "decode NT MB/s");
for (const path of paths) {
  const tok = Tokenizer.fromFile(path);
  const opts = { addSpecialTokens: false };
  const ids = (await tok.encode(corpus, null, opts)).getIds();
  const lineIds = (await tok.encodeBatch(lines, opts)).map((e) => e.getIds());
  const enc1 = await timeIt(() => tok.encode(corpus, null, opts));
  const encn = await timeIt(() => tok.encodeBatch(lines, opts));
  const dec1 = await timeIt(() => tok.decode(ids, false));
  const decn = await timeIt(() => tok.decodeBatch(lineIds, false));
  const row = { tokenizer: path, tokens: ids.length, encode_1thread_MBps: mb / enc1, encode_all_threads_MBps: mb / encn,
                decode_1thread_MBps: mb / dec1, decode_all_threads_MBps: mb / decn };
  record.results.push(row);
  const label = path.length <= 40 ? path : "..." + path.slice(-37);
  console.log(label.padEnd(40), String(ids.length).padStart(9), ...[enc1, encn, dec1, decn].map((t) => (mb / t).toFixed(1).padStart(14)));
}
if (out) fs.writeFileSync(out, JSON.stringify(record, null, 2) + "\n");
