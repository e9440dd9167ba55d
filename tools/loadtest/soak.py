#!/usr/bin/env python3
"""One-command soak of `stapes serve` on loopback (standard library only).

Starts the server (or uses --url with --server-pid), keeps -c transcription requests in flight
(and --ws streaming sessions, jfk.wav sent as fast as the server takes it) for --minutes, samples
the server's RSS and threads from /proc and its gauges from /metrics every --every seconds, then
waits for the server to go idle and checks that nothing was left behind.

    python3 tools/loadtest/soak.py --stapes target/release/stapes -m whisper-tiny.en --minutes 10

Pass/fail (exit 1 on any):
  * every request answered 200 with the expected text; every stream ended with `done`;
  * RSS growth < --max-rss-growth (mean of the last minute vs the first minute after warm-up);
  * idle at the end: no admitted requests, no running jobs, no open sessions, and the runtime's
    alive tasks back to (at most) the idle count measured after one warm-up request and stream.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from load import Runner, loopback_only, percentile, rss_kib, threads_of, words  # noqa: E402
from ws_client import WsError, stream_file  # noqa: E402

GAUGES = [
    "stapes_tokio_alive_tasks",
    "stapes_http_in_flight",
    "stapes_requests_admitted",
    "stapes_jobs_running",
    "stapes_queue_depth",
    "stapes_ws_sessions",
]


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for g in GAUGES:
        m = re.search(rf"^{g} (\S+)$", text, re.M)
        if m:
            out[g] = float(m.group(1))
    return out


def start_server(a):
    args = [a.stapes, "serve", "--host", "127.0.0.1", "--port", "0", "--beam-size", str(a.beam_size),
            "--queue", "256"]
    for m in a.model:
        args += ["-m", m]
    args += a.server_arg
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    url = None
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
        if time.monotonic() > deadline:
            break
    if not url:
        proc.kill()
        sys.exit("stapes serve did not start")
    # Keep draining stderr so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return proc, url


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stapes", default=os.path.join(HERE, "../../target/release/stapes"))
    p.add_argument("-m", "--model", action="append", default=[],
                   help="server -m spec (repeatable); default whisper-tiny.en")
    p.add_argument("--server-arg", action="append", default=[], help="extra `stapes serve` argument")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--url", help="use a running server instead (needs --server-pid)")
    p.add_argument("--server-pid", type=int)
    p.add_argument("--file", default=os.path.join(HERE, "../../samples/jfk.wav"))
    p.add_argument("--expect", default="ask not what your country can do for you")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("-c", "--concurrency", type=int, default=3, help="HTTP requests in flight")
    p.add_argument("--ws", type=int, default=1, help="streaming sessions in flight")
    p.add_argument("--every", type=float, default=5.0, help="sampling period, s")
    p.add_argument("--max-rss-growth", type=float, default=0.10)
    p.add_argument("--warmup-s", type=float, default=30.0, help="samples ignored at the start")
    p.add_argument("--json-out", help="also write the summary here")
    a = p.parse_args()
    if not a.model:
        a.model = ["whisper-tiny.en"]

    proc = None
    if a.url:
        if not a.server_pid:
            sys.exit("--url needs --server-pid (RSS is read from /proc)")
        url, pid = a.url.rstrip("/"), a.server_pid
    else:
        proc, url = start_server(a)
        pid = proc.pid
    loopback_only(url)

    http = Runner(argparse.Namespace(url=url, file=a.file, model="whisper-1", format="json",
                                     expect=a.expect, api_key=None, timeout=600.0,
                                     path="/v1/audio/transcriptions"))
    # One request and one stream first: the server starts its long-lived tasks (the batcher's
    # dispatcher) on first use, and those are not leaks.
    http.one()
    if a.ws:
        stream_file(url, a.file, speed=0, timeout=600.0)
    http.results.clear()
    time.sleep(1)
    idle_before = scrape(url)
    stop = time.monotonic() + a.minutes * 60.0
    streams, lock = [], threading.Lock()
    samples = []

    def http_worker():
        while time.monotonic() < stop:
            http.one()

    def ws_worker():
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            err = None
            try:
                events, _ = stream_file(url, a.file, speed=0, timeout=600.0)
                done = [e for e in events if e["type"] == "done"]
                if not done:
                    err = "no done event: " + json.dumps(events[-1:])[:200]
                elif a.expect and words(a.expect) not in words(done[0]["text"]):
                    err = "wrong text: " + done[0]["text"][:200]
                partials = sum(e["type"] == "partial" for e in events)
            except (WsError, OSError) as e:
                err, partials = f"{type(e).__name__}: {e}", 0
            with lock:
                streams.append((time.perf_counter() - t0, err, partials))

    def sampler():
        t0 = time.monotonic()
        while time.monotonic() < stop:
            row = {"t": round(time.monotonic() - t0, 1), "rss_kib": rss_kib(pid), "threads": threads_of(pid)}
            try:
                row.update(scrape(url))
            except OSError as e:
                row["scrape_error"] = str(e)
            samples.append(row)
            time.sleep(a.every)

    threads = [threading.Thread(target=http_worker) for _ in range(a.concurrency)]
    threads += [threading.Thread(target=ws_worker) for _ in range(a.ws)]
    threads.append(threading.Thread(target=sampler))
    wall0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - wall0

    # Idle: wait for the last jobs (a request timed out client-side may still be computing).
    idle_after, waited = {}, 0.0
    while waited < 120:
        idle_after = scrape(url)
        busy = sum(idle_after.get(g, 0) for g in
                   ("stapes_requests_admitted", "stapes_jobs_running", "stapes_queue_depth", "stapes_ws_sessions"))
        if busy == 0 and idle_after.get("stapes_tokio_alive_tasks", 0) <= idle_before.get("stapes_tokio_alive_tasks", 0):
            break
        time.sleep(1)
        waited += 1
    rss_end = rss_kib(pid)

    res = http.results
    fails = [r for r in res if r[3] is not None]
    lat = [r[1] for r in res]
    ws_fails = [s for s in streams if s[1] is not None]
    rss = [(s["t"], s["rss_kib"]) for s in samples if s["rss_kib"] and s["t"] >= a.warmup_s]
    growth = None
    if len(rss) >= 2:
        first = [v for t, v in rss if t <= rss[0][0] + 60]
        last = [v for t, v in rss if t >= rss[-1][0] - 60]
        growth = statistics.fmean(last) / statistics.fmean(first) - 1.0
    def series(key):
        xs = [s[key] for s in samples if s.get(key) is not None]
        return {"first": xs[0], "last": xs[-1], "max": max(xs)} if xs else None
    summary = {
        "minutes": a.minutes,
        "wall_s": round(wall, 1),
        "http": {
            "requests": len(res), "ok": len(res) - len(fails), "failed": len(fails),
            "concurrency": a.concurrency,
            "p50_s": round(percentile(lat, 50), 3), "p99_s": round(percentile(lat, 99), 3),
            "first_errors": sorted({r[3] for r in fails})[:5],
        },
        "ws": {
            "sessions": len(streams), "ok": len(streams) - len(ws_fails), "failed": len(ws_fails),
            "partials": sum(s[2] for s in streams),
            "p50_s": round(percentile([s[0] for s in streams], 50), 3) if streams else None,
            "first_errors": sorted({s[1] for s in ws_fails})[:5],
        },
        "rss_kib": {
            "first_min": round(statistics.fmean(first)) if growth is not None else None,
            "last_min": round(statistics.fmean(last)) if growth is not None else None,
            "max": max(v for _, v in rss) if rss else None,
            "after_idle": rss_end,
            "growth": round(growth, 4) if growth is not None else None,
        },
        "threads": series("threads"),
        "alive_tasks": {**(series("stapes_tokio_alive_tasks") or {}),
                        "idle_before": idle_before.get("stapes_tokio_alive_tasks"),
                        "idle_after": idle_after.get("stapes_tokio_alive_tasks")},
        "in_flight_max": (series("stapes_http_in_flight") or {}).get("max"),
        "ws_sessions_max": (series("stapes_ws_sessions") or {}).get("max"),
        "idle_after": idle_after,
    }
    leaked = (
        sum(idle_after.get(g, 0) for g in ("stapes_requests_admitted", "stapes_jobs_running",
                                            "stapes_queue_depth", "stapes_ws_sessions")) > 0
        or idle_after.get("stapes_tokio_alive_tasks", 0) > idle_before.get("stapes_tokio_alive_tasks", 0)
    )
    rss_ok = growth is not None and growth < a.max_rss_growth
    summary["pass"] = not fails and not ws_fails and rss_ok and not leaked
    summary["leaked"] = leaked
    out = json.dumps(summary, indent=2)
    print(out)
    if a.json_out:
        with open(a.json_out, "w") as f:
            f.write(json.dumps({**summary, "samples": samples}, indent=1) + "\n")
    if proc:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    sys.exit(0 if summary["pass"] else 1)


if __name__ == "__main__":
    main()
