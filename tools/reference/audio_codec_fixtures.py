#!/usr/bin/env python3
"""Encode short excerpts of samples/jfk.wav as FLAC and Ogg Vorbis for the stapes-audio decode tests.

The encoder is ffmpeg's (through PyAV, pip install av); the expected signal in the tests is the
original jfk.wav, not anything our decoder produced.
  * jfk_2s_16k_mono.flac      first 2 s, 16 kHz mono 16-bit: lossless, must decode bit-exactly.
  * jfk_2s_44k_stereo_s24.flac first 2 s resampled by ffmpeg to 44.1 kHz, stereo, 24-bit.
  * jfk_3s_48k_stereo.ogg     first 3 s resampled by ffmpeg to 48 kHz, stereo, Vorbis.
Run from the repository root: python tools/reference/audio_codec_fixtures.py
The FLAC files come out byte-identical on every run; the Ogg file differs in its random stream
serial number (and so the page checksums) only.
"""

import fractions
import wave
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/stapes-audio/tests/fixtures"


def encode(pcm_s16, path, codec, rate, layout, fmt, options=None):
    src_rate = 16000
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        # ffmpeg's native Vorbis encoder is flagged experimental.
        stream.options = {"strict": "experimental", **(options or {})}
        resampler = av.AudioResampler(format=fmt, layout=layout, rate=rate)
        frame = av.AudioFrame.from_ndarray(pcm_s16[None, :], format="s16", layout="mono")
        frame.sample_rate = src_rate
        pts = 0
        for rframe in resampler.resample(frame) + resampler.resample(None):
            # Explicit timestamps: without them the Ogg muxer writes a wrong final granule
            # position, which a spec-following reader (symphonia) then trims the stream to.
            rframe.pts = pts
            rframe.time_base = fractions.Fraction(1, rate)
            pts += rframe.samples
            for packet in stream.encode(rframe):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def main():
    with wave.open(str(ROOT / "samples/jfk.wav"), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()
    OUT.mkdir(parents=True, exist_ok=True)
    encode(pcm[:32000], OUT / "jfk_2s_16k_mono.flac", "flac", 16000, "mono", "s16")
    encode(pcm[:32000], OUT / "jfk_2s_44k_stereo_s24.flac", "flac", 44100, "stereo", "s32")
    encode(pcm[:48000], OUT / "jfk_3s_48k_stereo.ogg", "vorbis", 48000, "stereo", "fltp")
    for p in sorted(OUT.glob("jfk_*")):
        print(p.relative_to(ROOT), p.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
