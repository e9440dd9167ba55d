#!/usr/bin/env python3
"""Checks `stapes serve` with the official `openai` Python client (`pip install openai`).

    stapes serve -m whisper-tiny.en --port 8080 --api-key k &
    python3 tools/loadtest/openai_check.py --url http://127.0.0.1:8080 --api-key k

jfk.wav must come back as the jfk sentence in every response_format, streamed too, and the
client must raise its usual exceptions for a bad key, an unknown model, a bad response_format
and a file that is not audio. Exit status 1 on the first mismatch.
"""

import argparse
import io
import os
import re
import sys

import openai
from openai import OpenAI

JFK = ["and so my fellow americans ask not what your country can do for you", "ask what you can do for your country"]


def words(s):
    return " ".join(re.sub(r"[^0-9a-z]+", " ", s.lower()).split())


def check_jfk(label, text):
    w = words(text)
    missing = [p for p in JFK if p not in w]
    if missing:
        sys.exit(f"FAIL {label}: {missing} not in {text!r}")
    print(f"ok   {label}")


def expect_error(label, cls, status, fn):
    try:
        fn()
    except cls as e:
        body = getattr(e, "body", None)
        if getattr(e, "status_code", status) != status or not isinstance(body, dict) or "message" not in body:
            sys.exit(f"FAIL {label}: status {getattr(e, 'status_code', None)}, body {body!r}")
        print(f"ok   {label}: {status} {body.get('code')}")
        return
    except Exception as e:  # noqa: BLE001
        sys.exit(f"FAIL {label}: raised {type(e).__name__}: {e}")
    sys.exit(f"FAIL {label}: no error raised")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default="whisper-1")
    p.add_argument("--file", default=os.path.join(os.path.dirname(__file__), "../../samples/jfk.wav"))
    a = p.parse_args()
    audio = open(a.file, "rb").read()
    name = os.path.basename(a.file)
    c = OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key=a.api_key, max_retries=0, timeout=600)

    def tr(**kw):
        return c.audio.transcriptions.create(model=a.model, file=(name, audio), **kw)

    check_jfk("json", tr().text)
    for fmt in ("text", "srt", "vtt"):
        out = tr(response_format=fmt)
        if not isinstance(out, str):
            sys.exit(f"FAIL {fmt}: expected str, got {type(out).__name__}")
        if fmt == "vtt" and not out.startswith("WEBVTT"):
            sys.exit(f"FAIL vtt: {out[:40]!r}")
        if fmt == "srt" and " --> " not in out:
            sys.exit(f"FAIL srt: {out[:60]!r}")
        check_jfk(fmt, out)
    v = tr(response_format="verbose_json", timestamp_granularities=["word", "segment"])
    check_jfk("verbose_json", v.text)
    if not v.segments or not v.words or abs(v.duration - 11.0) > 0.1:
        sys.exit(f"FAIL verbose_json: segments {len(v.segments or [])}, words {len(v.words or [])}, duration {v.duration}")
    print(f"ok   verbose_json: {len(v.segments)} segments, {len(v.words)} words, language {v.language}")

    done, deltas = None, []
    for ev in tr(stream=True):
        if ev.type == "transcript.text.delta":
            deltas.append(ev.delta)
        elif ev.type == "transcript.text.done":
            done = ev.text
    if done is None or not deltas:
        sys.exit(f"FAIL stream: done {done!r}, {len(deltas)} deltas")
    check_jfk(f"stream ({len(deltas)} deltas + done)", done)
    if words("".join(deltas)) != words(done):
        sys.exit("FAIL stream: the deltas do not add up to the done text")

    bad = OpenAI(base_url=c.base_url, api_key="wrong-key", max_retries=0)
    if a.api_key != "none":
        expect_error("bad api key", openai.AuthenticationError, 401,
                     lambda: bad.audio.transcriptions.create(model=a.model, file=(name, audio)))
    expect_error("unknown model", openai.NotFoundError, 404,
                 lambda: c.audio.transcriptions.create(model="no-such-model", file=(name, audio)))
    expect_error("unknown response_format", openai.BadRequestError, 400,
                 lambda: c.audio.transcriptions.create(model=a.model, file=(name, audio), response_format="xml"))
    expect_error("not audio", openai.APIStatusError, 415,
                 lambda: c.audio.transcriptions.create(model=a.model, file=("notes.txt", io.BytesIO(b"hello " * 100))))
    expect_error("truncated audio", openai.BadRequestError, 400,
                 lambda: c.audio.transcriptions.create(model=a.model, file=(name, audio[:5000])))
    print("all checks passed")


if __name__ == "__main__":
    main()
