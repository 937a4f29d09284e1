#!/usr/bin/env node
// Load generator for `kestrel serve` (or any OpenAI-compatible server): N concurrent clients,
// each sending streaming /v1/completions requests back to back with a mix of prompt and output
// lengths; reports throughput and time-to-first-token / inter-token latency percentiles.
//
//   node bench/serve_load.mjs --url http://127.0.0.1:8080 --clients 1,16,64 --requests 64 \
//        [--prompt 128:1024] [--output 64:256] [--vocab 1000] [--out bench/results/serve-NAME.json]
//
// Prompts are random token ids (so their length is exact); --vocab bounds the ids used.
import { writeFileSync } from 'node:fs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
  return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8080';
const clientsList = (args.clients ?? '1,16,64').split(',').map(Number);
const requests = Number(args.requests ?? 64);
const [pMin, pMax] = (args.prompt ?? '128:1024').split(':').map(Number);
const [oMin, oMax] = (args.output ?? '64:256').split(':').map(Number);
const vocab = Number(args.vocab ?? 1000);

let seed = 12345;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const between = (a, b) => a + Math.floor(rand() * (b - a + 1));
const pct = (xs, p) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] : NaN);

async function one(model) {
  const prompt = Array.from({ length: between(pMin, pMax) }, () => between(10, vocab - 1));
  const maxTokens = between(oMin, oMax);
  const t0 = performance.now();
  const r = await fetch(url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true }) });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '', first = null, last = null, tokens = 0;
  const itl = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const now = performance.now();
      const chunk = JSON.parse(ev.slice(6));
      if (!chunk.choices?.length) continue;
      tokens += 1;  // one chunk per step carries that step's token(s)
      if (first === null) first = now; else itl.push(now - last);
      last = now;
    }
  }
  return { prompt: prompt.length, output: maxTokens, ttft: first - t0, itl, total: performance.now() - t0 };
}

const models = await (await fetch(url + '/v1/models')).json();
const model = models.data[0].id;
const results = [];
console.log(`server ${url}, model ${model}; prompts ${pMin}-${pMax} tokens, outputs ${oMin}-${oMax} tokens`);
console.log('clients  requests  out tok/s  req/s   TTFT p50/p90/p99 ms        ITL p50/p90/p99 ms');
for (const clients of clientsList) {
  const n = Math.max(requests, clients);
  let next = 0;
  const done = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < n) {
      next++;
      done.push(await one(model));
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  const outTokens = done.reduce((s, d) => s + d.output, 0);
  const ttft = done.map((d) => d.ttft), itl = done.flatMap((d) => d.itl);
  const row = { clients, requests: done.length, seconds: secs, output_tokens_per_s: outTokens / secs,
    requests_per_s: done.length / secs, ttft_ms: { p50: pct(ttft, 0.5), p90: pct(ttft, 0.9), p99: pct(ttft, 0.99) },
    itl_ms: { p50: pct(itl, 0.5), p90: pct(itl, 0.9), p99: pct(itl, 0.99) } };
  results.push(row);
  const f = (x) => x.toFixed(1).padStart(7);
  console.log(`${String(clients).padStart(7)} ${String(done.length).padStart(9)} ${f(row.output_tokens_per_s)} ${row.requests_per_s.toFixed(2).padStart(6)}  ` +
              `${f(row.ttft_ms.p50)} ${f(row.ttft_ms.p90)} ${f(row.ttft_ms.p99)}   ${f(row.itl_ms.p50)} ${f(row.itl_ms.p90)} ${f(row.itl_ms.p99)}`);
}
if (args.out) {
  writeFileSync(args.out, JSON.stringify({ url, model, date: new Date().toISOString(), command: process.argv.join(' '),
    prompt_tokens: [pMin, pMax], output_tokens: [oMin, oMax], results }, null, 1) + '\n');
  console.log('wrote', args.out);
}
