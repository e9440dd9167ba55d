#!/usr/bin/env python3
"""The gigaam package's own encoder on the CPU, for the ledger's GigaAM rows beside
`stapes bench --synthetic gigaam-v3-ctc --device cpu --audio samples/jfk.wav`.

Builds `GigaAMASR` from the published v3 CTC config (random weights: the time does not depend on
them), takes jfk.wav's log-mel from the model's own FeatureExtractor, and times `model.encoder`
(median and min of 5 after 2 warm runs) and the package's front end + encoder + CTC decoding.

    /tmp/tv/bin/python tools/bench/gigaam_torch_cpu.py --gigaam-src /tmp/giga [--threads 2]

Needs torch, torchaudio, omegaconf, hydra-core, soundfile (the venv of
tools/reference/gigaam_ckpt.py) and GigaAM's source (salute-developers/GigaAM).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gigaam-src", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.gigaam_src).resolve()))
    import omegaconf
    import soundfile as sf
    import torch
    from gigaam.model import GigaAMASR

    torch.set_num_threads(args.threads)
    vocab = [" "] + [chr(c) for c in range(ord("а"), ord("я") + 1)]
    cfg = omegaconf.OmegaConf.create({
        "model_class": "ctc", "sample_rate": 16000,
        "preprocessor": {"_target_": "gigaam.preprocess.FeatureExtractor", "sample_rate": 16000,
                         "features": 64, "win_length": 320, "hop_length": 160,
                         "mel_scale": "htk", "n_fft": 320, "mel_norm": None, "center": False},
        "encoder": {"_target_": "gigaam.encoder.ConformerEncoder", "feat_in": 64, "n_layers": 16,
                    "d_model": 768, "subsampling_factor": 4, "ff_expansion_factor": 4,
                    "self_attention_model": "rotary", "pos_emb_max_len": 5000, "n_heads": 16,
                    "conv_kernel_size": 5, "flash_attn": False, "subs_kernel_size": 5,
                    "subsampling": "conv1d", "conv_norm_type": "layer_norm"},
        "head": {"_target_": "gigaam.decoder.CTCHead", "feat_in": 768, "num_classes": 34},
        "decoding": {"_target_": "gigaam.decoding.CTCGreedyDecoding", "vocabulary": vocab},
        "model_name": "v3_ctc"})
    m = GigaAMASR(cfg).eval()
    wav, _ = sf.read(str(ROOT / "samples/jfk.wav"), dtype="int16")
    x = torch.tensor(wav, dtype=torch.float32)[None] / 32768.0
    n = torch.tensor([x.shape[1]])
    with torch.inference_mode():
        f, fl = m.preprocessor(x, n)
        for _ in range(2):
            m.encoder(f, fl)
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            m.encoder(f, fl)
            ts.append(time.perf_counter() - t)
        print(f"encoder, {x.shape[1] / 16000:.1f} s: median {statistics.median(ts) * 1e3:.1f} ms,"
              f" min {min(ts) * 1e3:.1f} ({args.threads} threads, torch {torch.__version__})")
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            m.decoding.decode(m.head, *m.forward(x, n))
            ts.append(time.perf_counter() - t)
        print(f"front end + encoder + CTC greedy: median {statistics.median(ts) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
