#!/usr/bin/env python3
"""WebSocket client for `stapes serve`'s streaming endpoint (loopback only, standard library only).

Streams a 16-bit PCM WAV file to ws://HOST:PORT/v1/audio/stream in chunks, as a microphone would
(real time by default), prints the server's events as they arrive, and ends with {"type":"end"}.

    python3 tools/loadtest/ws_client.py --url http://127.0.0.1:8080 samples/jfk.wav
    python3 tools/loadtest/ws_client.py --speed 0 --json samples/jfk.wav   # as fast as possible

The WAV's own sample rate is sent as `sample_rate` (the server resamples); stereo is mixed down.
Exit status 1 if the server sent an error event or did not finish with `done`.
"""

import argparse
import base64
import json
import os
import socket
import struct
import sys
import time
import urllib.parse
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import loopback_only  # noqa: E402


class WsError(Exception):
    pass


class Ws:
    """A minimal RFC 6455 client: text/binary out (masked), text/close/ping in."""

    def __init__(self, host, port, path, headers=(), timeout=300.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *headers,
        ]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WsError("connection closed during the handshake")
            self.buf += chunk
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        if " 101 " not in status + " ":
            # The refusal's JSON body, when the server sent one with a length.
            body = self.buf
            raise WsError(f"{status}: {body[:500].decode('utf-8', 'replace')}")

    def send(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send_binary(self, data):
        self.send(0x2, data)

    def send_text(self, text):
        self.send(0x1, text.encode())

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WsError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """(opcode, payload) of the next whole message; control frames are returned too."""
        b0, b1 = self._read(2)
        opcode, n = b0 & 0x0F, b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read(8))
        if b1 & 0x80:
            raise WsError("server frames must not be masked")
        payload = self._read(n)
        if not b0 & 0x80:
            raise WsError("fragmented messages are not expected from this server")
        if opcode == 0x9:  # ping
            self.send(0xA, payload)
        return opcode, payload

    def pending(self):
        """Whether a message may be waiting (without blocking)."""
        if self.buf:
            return True
        self.sock.setblocking(False)
        try:
            chunk = self.sock.recv(65536)
            if chunk:
                self.buf += chunk
            return bool(chunk)
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)

    def close(self):
        try:
            self.send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()


def read_wav(path):
    with wave.open(path) as w:
        if w.getsampwidth() != 2:
            raise SystemExit(f"{path}: only 16-bit PCM WAV is supported here")
        rate, ch = w.getframerate(), w.getnchannels()
        data = w.readframes(w.getnframes())
    if ch > 1:
        s = struct.unpack(f"<{len(data) // 2}h", data)
        mono = [int(sum(s[i : i + ch]) / ch) for i in range(0, len(s), ch)]
        data = struct.pack(f"<{len(mono)}h", *mono)
    return rate, data


def stream_file(url, path, model=None, language=None, chunk_ms=100, speed=1.0, api_key=None,
                on_event=None, extra_query=None, timeout=300.0):
    """Stream one file; returns (events, seconds from the first byte sent to `done`)."""
    host, port = loopback_only(url)
    rate, pcm = read_wav(path)
    q = {"sample_rate": rate}
    if model:
        q["model"] = model
    if language:
        q["language"] = language
    q.update(extra_query or {})
    headers = [f"Authorization: Bearer {api_key}"] if api_key else []
    ws = Ws(host, port, "/v1/audio/stream?" + urllib.parse.urlencode(q), headers, timeout)
    events = []

    def take(opcode, payload):
        if opcode == 0x1:
            ev = json.loads(payload)
            ev["_at"] = round(time.perf_counter() - t0, 3)
            events.append(ev)
            if on_event:
                on_event(ev)
        return opcode != 0x8

    step = rate * 2 * chunk_ms // 1000
    t0 = time.perf_counter()
    open_ = True
    try:
        for i in range(0, len(pcm), step):
            ws.send_binary(pcm[i : i + step])
            due = t0 + (i // step + 1) * chunk_ms / 1000.0 / speed if speed > 0 else 0
            while open_ and (ws.pending() or time.perf_counter() < due):
                if ws.pending():
                    open_ = take(*ws.recv())
                else:
                    time.sleep(min(0.005, max(0.0, due - time.perf_counter())))
            if not open_:
                break
        if open_:
            ws.send_text('{"type":"end"}')
            while open_:
                open_ = take(*ws.recv())
    finally:
        ws.close()
    return events, time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file")
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model")
    p.add_argument("--language")
    p.add_argument("--api-key")
    p.add_argument("--chunk-ms", type=int, default=100)
    p.add_argument("--speed", type=float, default=1.0, help="times real time; 0 = as fast as possible")
    p.add_argument("--json", action="store_true", help="print each event as one JSON line")
    a = p.parse_args()

    def show(ev):
        if a.json:
            print(json.dumps(ev), flush=True)
        elif ev["type"] in ("partial", "final"):
            mark = "…" if ev["type"] == "partial" else "✓"
            print(f"[{ev['_at']:7.2f} s] {mark} {ev['start']:6.2f}-{ev['end']:6.2f} {ev['text']}", flush=True)
        elif ev["type"] == "error":
            print(f"[{ev['_at']:7.2f} s] error: {ev.get('error')}", flush=True)
        elif ev["type"] == "done":
            print(f"[{ev['_at']:7.2f} s] done ({ev['duration']:.2f} s of audio): {ev['text']}", flush=True)

    try:
        events, _ = stream_file(a.url, a.file, a.model, a.language, a.chunk_ms, a.speed, a.api_key, show)
    except WsError as e:
        sys.exit(f"refused: {e}")
    ok = bool(events) and events[-1]["type"] == "done"
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
