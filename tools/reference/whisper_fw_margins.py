#!/usr/bin/env python3
"""Decision margins of faster-whisper's float32 greedy path on the Whisper test clips.

At every step of greedy decoding the chosen token beats the runner-up by some log-probability
margin. Where that margin is tiny, any rounding of the weights can flip the choice, so a lane's
promise of "the same text as float32" only means something on clips without such near-ties. This
script runs faster-whisper 1.2.1 (CTranslate2 float32, the options of whisper_fw.py) with
`return_logits_vocab=True` injected into its `generate` calls, checks the ids equal the greedy
fixture's, and records per clip and step the margin (log-prob of the chosen token minus the best other token,
after CTranslate2's suppression and timestamp rules), and the smallest one with its step and
both tokens.

Writes crates/stapes-models/tests/fixtures/whisper/fw_margins.json.
"""
import json
import sys
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whisper_fw import CACHE, CLIPS, COMMON, MODELS, OUT  # noqa: E402


class Recorder:
    """Stands in for the CTranslate2 model: adds return_logits_vocab to generate, keeps results."""

    def __init__(self, inner):
        self.inner = inner
        self.results = []

    def generate(self, *args, **kwargs):
        kwargs["return_logits_vocab"] = True
        out = self.inner.generate(*args, **kwargs)
        self.results.extend(out)
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def main():
    fixture = json.loads((OUT / "fw_decode.json").read_text())
    out = {"rule": "min over greedy steps of logprob(chosen) - max logprob(other)", "models": {}}
    for name in MODELS:
        model = WhisperModel(str(CACHE / "models" / name), device="cpu", compute_type="float32", cpu_threads=2)
        rec = Recorder(model.model)
        model.model = rec
        per = {}
        for clip, path in CLIPS.items():
            rec.results.clear()
            audio = decode_audio(str(path), sampling_rate=16000)
            segs, _ = model.transcribe(audio, beam_size=1, **COMMON)
            ids = [t for s in segs for t in s.tokens]
            want = [t for s in fixture["models"][name]["clips"][clip]["greedy"]["segments"] for t in s["tokens"]]
            assert ids == want, f"{name} {clip}: ids differ from fw_decode.json"
            assert len(rec.results) == 1, f"{name} {clip}: {len(rec.results)} generate calls"
            r = rec.results[0]
            seq = r.sequences_ids[0]
            assert list(seq) == ids, f"{name} {clip}: generate's sequence is not the segments' ids"
            margins = []
            best = None
            for step, lp in enumerate(r.logits[0]):
                lp = np.array(lp, dtype=np.float64).reshape(-1)
                chosen = int(seq[step]) if step < len(seq) else int(np.argmax(lp))
                other = lp.copy()
                other[chosen] = -np.inf
                runner = int(np.argmax(other))
                m = float(lp[chosen] - other[runner])
                margins.append(round(m, 4))
                if best is None or m < best["margin"]:
                    best = {"margin": m, "step": step, "chosen": chosen, "runner_up": runner}
            # margins[i]: the decision that produced ids[i] (the last one: end of text)
            per[clip] = {"min": best, "margins": margins}
            print(name, clip, best, file=sys.stderr)
        out["models"][name] = per
    with open(OUT / "fw_margins.json", "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
