#!/usr/bin/env python3
"""Load generator for `kestrel serve` (the Python twin of bench/serve_load.mjs, for machines
without Node.js): N concurrent clients send streaming /v1/completions requests back to back with a
mix of prompt and output lengths; prints throughput and TTFT / inter-token latency percentiles.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 --clients 1,16,64 --requests 64 \
        [--prompt 128:1024] [--output 64:256] [--vocab 1000] [--out FILE.json]
"""
import argparse, http.client, json, random, threading, time, urllib.parse
from concurrent.futures import ThreadPoolExecutor

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")

def one(url, model, rng, a):
    u = urllib.parse.urlparse(url)
    prompt = [rng.randint(10, a.vocab - 1) for _ in range(rng.randint(*a.prompt))]
    max_tokens = rng.randint(*a.output)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True})
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    first = last = None
    itl = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if not chunk.get("choices"):
            continue
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            itl.append(now - last)
        last = now
    c.close()
    return {"output": max_tokens, "ttft": (first - t0) if first else float("nan"), "itl": itl}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", default="1,16,64")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", default="128:1024")
    ap.add_argument("--output", default="64:256")
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--out")
    a = ap.parse_args()
    a.prompt = tuple(map(int, a.prompt.split(":")))
    a.output = tuple(map(int, a.output.split(":")))
    u = urllib.parse.urlparse(a.url)
    c = http.client.HTTPConnection(u.hostname, u.port)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    print(f"server {a.url}, model {model}; prompts {a.prompt} tokens, outputs {a.output} tokens")
    print("clients  requests  out tok/s  req/s   TTFT p50/p90/p99 ms        ITL p50/p90/p99 ms")
    rows = []
    for clients in map(int, a.clients.split(",")):
        n = max(a.requests, clients)
        lock, counter, done = threading.Lock(), [0], []
        def worker(k):
            rng = random.Random(1000 + k)
            while True:
                with lock:
                    if counter[0] >= n:
                        return
                    counter[0] += 1
                res = one(a.url, model, rng, a)
                with lock:
                    done.append(res)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as ex:
            list(ex.map(worker, range(clients)))
        secs = time.perf_counter() - t0
        out = sum(d["output"] for d in done)
        ttft = [d["ttft"] * 1e3 for d in done]
        itl = [x * 1e3 for d in done for x in d["itl"]]
        row = {"clients": clients, "requests": len(done), "seconds": secs, "output_tokens_per_s": out / secs,
               "requests_per_s": len(done) / secs,
               "ttft_ms": {"p50": pct(ttft, .5), "p90": pct(ttft, .9), "p99": pct(ttft, .99)},
               "itl_ms": {"p50": pct(itl, .5), "p90": pct(itl, .9), "p99": pct(itl, .99)}}
        rows.append(row)
        print(f"{clients:7d} {len(done):9d} {row['output_tokens_per_s']:10.1f} {row['requests_per_s']:6.2f}  "
              f"{row['ttft_ms']['p50']:7.1f} {row['ttft_ms']['p90']:7.1f} {row['ttft_ms']['p99']:7.1f}   "
              f"{row['itl_ms']['p50']:7.1f} {row['itl_ms']['p90']:7.1f} {row['itl_ms']['p99']:7.1f}", flush=True)
    if a.out:
        json.dump({"url": a.url, "model": model, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "prompt_tokens": a.prompt, "output_tokens": a.output, "results": rows}, open(a.out, "w"), indent=1)
        print("wrote", a.out)

if __name__ == "__main__":
    main()
