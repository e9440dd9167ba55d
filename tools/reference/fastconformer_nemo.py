#!/usr/bin/env python3
"""Write the committed tiny Parakeet TDT fixture (from fastconformer_hf.py) as a NeMo `.nemo`.

Runs with /tmp/audio-venv (torch 2.15, transformers 5.24.0, PyYAML 6, sentencepiece 0.2.3). NeMo itself is not
installed here, so the archive is written in NeMo's layout by hand:

  tdt.nemo (uncompressed tar, as NeMo's SaveRestoreConnector writes it)
    ./model_config.yaml   the OmegaConf-style config NeMo's EncDecRNNTBPEModel / TDT models
                          carry: preprocessor, encoder (ConformerEncoder), decoder (RNNTDecoder
                          prednet), joint (jointnet), labels, model_defaults.tdt_durations,
                          decoding.durations
    ./model_weights.ckpt  `torch.save(state_dict)` (PyTorch zip + pickle) under NeMo's names

Names are the inverse of transformers' `convert_nemo_to_hf.py` mapping (NEMO_TO_HF_WEIGHT_MAPPING
and NEMO_TDT_WEIGHT_MAPPING). Tensors keep the fixture's float16 values (stored as float16 to keep
the file small); NeMo's preprocessor buffers (featurizer.window, featurizer.fb) are included as a
real checkpoint has them, from transformers' ParakeetFeatureExtractor.

The tokenizer is a SentencePiece `ModelProto` holding the same pieces as the HF fixture's
tokenizer.json (written field by field: ModelProto.pieces = 1 {piece = 1, score = 2, type = 3},
plus a unigram trainer_spec), stored as `<hash>_tokenizer.model` and named by
`tokenizer.model_path: nemo:...` as NeMo does. The `sentencepiece` package (0.2.3, pip) loads it
and its own `decode` gives the expected text of every clip, written to expected_nemo.json.

The Rust test loads this archive and the HF directory of the same weights and requires identical
encoder outputs and greedy steps.
"""
import collections
import io
import json
import re
import struct
import tarfile
from pathlib import Path

import sentencepiece
import torch
import yaml
from safetensors.torch import load_file
from transformers import ParakeetFeatureExtractor

ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "crates/stapes-models/tests/fixtures/fastconformer"

HF_TO_NEMO = [
    (r"^encoder\.subsampling\.layers\.", "encoder.pre_encode.conv."),
    (r"^encoder\.subsampling\.linear\.", "encoder.pre_encode.out."),
    (r"^encoder\.layers\.(\d+)\.conv\.norm\.", r"encoder.layers.\1.conv.batch_norm."),
    (r"self_attn\.([kv])_proj", r"self_attn.linear_\1"),
    (r"self_attn\.o_proj", "self_attn.linear_out"),
    (r"self_attn\.q_proj", "self_attn.linear_q"),
    (r"self_attn\.bias_([uv])", r"self_attn.pos_bias_\1"),
    (r"self_attn\.relative_k_proj", "self_attn.linear_pos"),
    (r"^decoder\.embedding\.", "decoder.prediction.embed."),
    (r"^decoder\.lstm\.", "decoder.prediction.dec_rnn.lstm."),
    (r"^encoder_projector\.", "joint.enc."),
    (r"^decoder\.decoder_projector\.", "joint.pred."),
    (r"^joint\.head\.", "joint.joint_net.2."),
]


def nemo_name(k):
    for pat, rep in HF_TO_NEMO:
        k = re.sub(pat, rep, k)
    return k


def pb_varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(num, wire, payload):
    key = pb_varint((num << 3) | wire)
    if wire == 2:
        return key + pb_varint(len(payload)) + payload
    return key + payload


def sentencepiece_model(pieces):
    """ModelProto bytes: pieces (type 2 for <unk>, 1 otherwise) and a unigram trainer_spec."""
    out = b""
    for i, p in enumerate(pieces):
        kind = 2 if p == "<unk>" else 1
        msg = (pb_field(1, 2, p.encode()) + pb_field(2, 5, struct.pack("<f", -1.0 - 0.01 * i))
               + pb_field(3, 0, pb_varint(kind)))
        out += pb_field(1, 2, msg)
    # trainer_spec (field 2): model_type = UNIGRAM (3), vocab_size, unk_id 0, bos/eos/pad off (-1)
    neg1 = pb_varint((1 << 64) - 1)
    spec = (pb_field(3, 0, pb_varint(1)) + pb_field(4, 0, pb_varint(len(pieces)))
            + pb_field(40, 0, pb_varint(0)) + pb_field(41, 0, neg1) + pb_field(42, 0, neg1)
            + pb_field(43, 0, neg1))
    return out + pb_field(2, 2, spec)


def main():
    cfg = json.loads((FX / "tdt/config.json").read_text())
    enc = cfg["encoder_config"]
    hf = load_file(FX / "tdt/model.safetensors")
    # An OrderedDict with `_metadata`, as `module.state_dict()` returns (pickled with BUILD).
    sd = collections.OrderedDict((nemo_name(k), v) for k, v in sorted(hf.items()))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("encoder", {"version": 1})])
    fe = ParakeetFeatureExtractor(feature_size=enc["num_mel_bins"])
    sd["preprocessor.featurizer.window"] = torch.hann_window(400, periodic=False)
    sd["preprocessor.featurizer.fb"] = fe.mel_filters.T.contiguous()[None]
    labels = [f"tok{i}" for i in range(cfg["vocab_size"] - 1)]
    labels[0] = "<unk>"
    tok = json.loads((FX / "tdt/tokenizer.json").read_text())
    pieces = [p for p, _ in tok["model"]["vocab"]]
    spm_bytes = sentencepiece_model(pieces)
    spm = sentencepiece.SentencePieceProcessor(model_proto=spm_bytes)
    assert spm.get_piece_size() == len(pieces) and spm.id_to_piece(5) == pieces[5]
    expected = json.loads((FX / "expected.json").read_text())
    texts = {clip: spm.decode(r["ids"]) for clip, r in expected["models"]["tdt"]["results"].items()}
    (FX / "expected_nemo.json").write_text(json.dumps({"sentencepiece": sentencepiece.__version__,
                                                        "texts": texts}, indent=1) + "\n")
    tok_name = "0123abcd_tokenizer.model"
    config = {
        "sample_rate": 16000,
        "tokenizer": {"dir": None, "type": "bpe", "model_path": f"nemo:{tok_name}",
                      "vocab_path": None, "spe_tokenizer_vocab": None},
        "labels": labels,
        "model_defaults": {
            "enc_hidden": enc["hidden_size"],
            "pred_hidden": cfg["decoder_hidden_size"],
            "joint_hidden": cfg["decoder_hidden_size"],
            "tdt_durations": cfg["durations"],
            "num_tdt_durations": len(cfg["durations"]),
        },
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "normalize": "per_feature",
            "window_size": 0.025,
            "window_stride": 0.01,
            "window": "hann",
            "features": enc["num_mel_bins"],
            "n_fft": 512,
            "log": True,
            "frame_splicing": 1,
            "dither": 1.0e-05,
            "pad_to": 0,
            "pad_value": 0.0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": enc["num_mel_bins"],
            "feat_out": -1,
            "n_layers": enc["num_hidden_layers"],
            "d_model": enc["hidden_size"],
            "use_bias": True,
            "subsampling": "dw_striding",
            "subsampling_factor": enc["subsampling_factor"],
            "subsampling_conv_channels": enc["subsampling_conv_channels"],
            "causal_downsampling": False,
            "ff_expansion_factor": enc["intermediate_size"] // enc["hidden_size"],
            "self_attention_model": "rel_pos",
            "n_heads": enc["num_attention_heads"],
            "att_context_size": [-1, -1],
            "att_context_style": "regular",
            "xscaling": enc["scale_input"],
            "untie_biases": True,
            "pos_emb_max_len": 5000,
            "conv_kernel_size": enc["conv_kernel_size"],
            "conv_norm_type": "batch_norm",
            "conv_context_size": None,
            "dropout": 0.1,
            "dropout_pre_encoder": 0.1,
            "dropout_emb": 0.0,
            "dropout_att": 0.1,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "vocab_size": len(labels),
            "prednet": {"pred_hidden": cfg["decoder_hidden_size"],
                        "pred_rnn_layers": cfg["num_decoder_layers"], "t_max": None, "dropout": 0.2},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint",
            "log_softmax": None,
            "preserve_memory": False,
            "fuse_loss_wer": True,
            "fused_batch_size": 4,
            "jointnet": {"joint_hidden": cfg["decoder_hidden_size"], "activation": cfg["hidden_act"],
                         "dropout": 0.2, "encoder_hidden": enc["hidden_size"],
                         "pred_hidden": cfg["decoder_hidden_size"]},
            "num_classes": len(labels),
            "vocabulary": list(labels),
            "num_extra_outputs": len(cfg["durations"]),
        },
        "decoding": {
            "strategy": "greedy_batch",
            "model_type": "tdt",
            "durations": list(cfg["durations"]),
            "greedy": {"max_symbols": cfg["max_symbols_per_step"]},
        },
        "target": "nemo.collections.asr.models.rnnt_bpe_models.EncDecRNNTBPEModel",
    }
    ckpt = io.BytesIO()
    torch.save(sd, ckpt)
    files = {
        "./model_config.yaml": yaml.safe_dump(config, sort_keys=False).encode(),
        "./model_weights.ckpt": ckpt.getvalue(),
        f"./{tok_name}": spm_bytes,
    }
    out = FX / "tdt.nemo"
    with tarfile.open(out, "w:") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    print(out, out.stat().st_size)


if __name__ == "__main__":
    main()
