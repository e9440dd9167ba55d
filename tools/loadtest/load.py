#!/usr/bin/env python3
"""Load client for `stapes serve` (loopback only, standard library only).

Burst: N requests from C threads released together; reports status counts, p50/p90/p99 latency
and throughput, and checks every answer's text.

    python3 tools/loadtest/load.py --url http://127.0.0.1:8080 -n 200 -c 200 \
        --file samples/jfk.wav --expect "ask not what your country can do for you"

Soak: --soak-seconds S keeps C requests in flight for S seconds and, with --server-pid, samples
the server's RSS (first vs last minute) and thread count.

Exit status 1 if any request failed or returned the wrong text (or RSS grew past --max-rss-growth).
"""

import argparse
import http.client
import ipaddress
import json
import os
import re
import socket
import statistics
import sys
import threading
import time
import urllib.parse
import uuid
import wave


def loopback_only(url):
    u = urllib.parse.urlparse(url)
    if u.scheme != "http" or not u.hostname:
        sys.exit(f"--url must be http://HOST:PORT, got {url}")
    for info in socket.getaddrinfo(u.hostname, u.port or 80, proto=socket.IPPROTO_TCP):
        if not ipaddress.ip_address(info[4][0]).is_loopback:
            sys.exit(f"refusing {u.hostname}: this load client only talks to loopback addresses")
    return u.hostname, u.port or 80


def multipart(fields, file_name, file_bytes):
    boundary = "----stapes-load-" + uuid.uuid4().hex
    out = bytearray()
    for k, v in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
    out += (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file_name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    out += file_bytes + f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", bytes(out)


def words(s):
    return " ".join(re.sub(r"[^0-9a-z]+", " ", s.lower()).split())


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * (len(xs) - 1)))))
    return xs[k]


class Runner:
    def __init__(self, a):
        self.a = a
        self.host, self.port = loopback_only(a.url)
        with open(a.file, "rb") as f:
            self.audio = f.read()
        fields = {"model": a.model, "response_format": a.format}
        self.ctype, self.body = multipart(fields, os.path.basename(a.file), self.audio)
        self.expect = words(a.expect) if a.expect else None
        self.lock = threading.Lock()
        self.results = []  # (start, latency_s, status, error-or-None)

    def one(self):
        t0 = time.perf_counter()
        status, err = 0, None
        try:
            c = http.client.HTTPConnection(self.host, self.port, timeout=self.a.timeout)
            headers = {"Content-Type": self.ctype, "Content-Length": str(len(self.body))}
            if self.a.api_key:
                headers["Authorization"] = "Bearer " + self.a.api_key
            c.request("POST", self.a.path, body=self.body, headers=headers)
            r = c.getresponse()
            data = r.read()
            status = r.status
            c.close()
            if status != 200:
                err = data[:300].decode("utf-8", "replace")
            elif self.expect is not None:
                text = data.decode("utf-8", "replace")
                if self.a.format in ("json", "verbose_json"):
                    text = json.loads(text).get("text", "")
                if self.expect not in words(text):
                    err = "wrong text: " + text[:200]
        except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the run
            err = f"{type(e).__name__}: {e}"
        dt = time.perf_counter() - t0
        with self.lock:
            self.results.append((t0, dt, status, err))

    def burst(self):
        gate = threading.Barrier(self.a.concurrency)
        todo = list(range(self.a.requests))
        take = threading.Lock()

        def worker():
            try:
                gate.wait()
            except threading.BrokenBarrierError:
                pass
            while True:
                with take:
                    if not todo:
                        return
                    todo.pop()
                self.one()

        threads = [threading.Thread(target=worker) for _ in range(self.a.concurrency)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    def soak(self):
        stop = time.monotonic() + self.a.soak_seconds
        samples = []

        def worker():
            while time.monotonic() < stop:
                self.one()

        def sampler():
            while time.monotonic() < stop:
                samples.append((time.monotonic(), rss_kib(self.a.server_pid), threads_of(self.a.server_pid)))
                time.sleep(5)

        threads = [threading.Thread(target=worker) for _ in range(self.a.concurrency)]
        if self.a.server_pid:
            threads.append(threading.Thread(target=sampler))
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0, samples


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def threads_of(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def audio_seconds(path):
    try:
        with wave.open(path) as w:
            return w.getnframes() / float(w.getframerate())
    except Exception:  # noqa: BLE001 - not a WAV: throughput in audio seconds is then omitted
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--path", default="/v1/audio/transcriptions")
    p.add_argument("--file", default=os.path.join(os.path.dirname(__file__), "../../samples/jfk.wav"))
    p.add_argument("--model", default="whisper-1")
    p.add_argument("--format", default="json")
    p.add_argument("--api-key")
    p.add_argument("--expect", help="phrase every answer must contain (compared as lowercase words)")
    p.add_argument("-n", "--requests", type=int, default=200)
    p.add_argument("-c", "--concurrency", type=int, default=200)
    p.add_argument("--timeout", type=float, default=3600.0, help="per-request client timeout, s")
    p.add_argument("--soak-seconds", type=float, default=0.0)
    p.add_argument("--server-pid", type=int)
    p.add_argument("--max-rss-growth", type=float, default=0.10)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = p.parse_args()
    if a.concurrency < 1 or a.requests < 1 or a.concurrency > 1000:
        sys.exit("need 1 <= -c <= 1000 and -n >= 1")

    r = Runner(a)
    samples = []
    if a.soak_seconds > 0:
        wall, samples = r.soak()
    else:
        wall = r.burst()

    res = r.results
    lat = [x[1] for x in res]
    ok = [x[1] for x in res if x[3] is None]
    statuses = {}
    for x in res:
        statuses[str(x[2])] = statuses.get(str(x[2]), 0) + 1
    failures = [x for x in res if x[3] is not None]
    secs = audio_seconds(a.file)
    summary = {
        "requests": len(res),
        "concurrency": a.concurrency,
        "ok": len(ok),
        "failed": len(failures),
        "statuses": statuses,
        "wall_s": round(wall, 3),
        "throughput_rps": round(len(ok) / wall, 3) if wall > 0 else None,
        "audio_s_per_s": round(len(ok) * secs / wall, 2) if secs and wall > 0 else None,
        "latency_s": {
            "p50": round(percentile(lat, 50), 3),
            "p90": round(percentile(lat, 90), 3),
            "p99": round(percentile(lat, 99), 3),
            "max": round(max(lat), 3) if lat else None,
            "mean": round(statistics.fmean(lat), 3) if lat else None,
        },
        "first_errors": sorted({x[3] for x in failures})[:5],
    }
    rss_ok = True
    if samples:
        rss = [(t, v) for t, v, _ in samples if v is not None]
        if len(rss) >= 2:
            t_first, t_last = rss[0][0], rss[-1][0]
            first = [v for t, v in rss if t <= t_first + 60] or [rss[0][1]]
            last = [v for t, v in rss if t >= t_last - 60] or [rss[-1][1]]
            growth = statistics.fmean(last) / statistics.fmean(first) - 1.0
            summary["rss_kib"] = {"first_min": round(statistics.fmean(first)), "last_min": round(statistics.fmean(last)), "growth": round(growth, 4)}
            rss_ok = growth < a.max_rss_growth
        th = [n for _, _, n in samples if n is not None]
        if th:
            summary["server_threads"] = {"first": th[0], "last": th[-1], "max": max(th)}
    if a.json:
        print(json.dumps(summary, indent=2))
    else:
        l = summary["latency_s"]
        print(
            f"{summary['requests']} requests, concurrency {a.concurrency}: {summary['ok']} ok, "
            f"{summary['failed']} failed {statuses}\n"
            f"latency p50 {l['p50']} s  p90 {l['p90']} s  p99 {l['p99']} s  max {l['max']} s\n"
            f"wall {summary['wall_s']} s, {summary['throughput_rps']} req/s, "
            f"{summary['audio_s_per_s']} audio s/s"
        )
        if "rss_kib" in summary:
            print(f"server RSS {summary['rss_kib']}, threads {summary.get('server_threads')}")
        for e in summary["first_errors"]:
            print("error:", e)
    sys.exit(0 if not failures and rss_ok else 1)


if __name__ == "__main__":
    main()
