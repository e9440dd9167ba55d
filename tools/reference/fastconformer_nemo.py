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
import os
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
# FC_FIXTURES: write (and read) the fixtures elsewhere, e.g. a scratch copy
FX = Path(os.environ.get("FC_FIXTURES", ROOT / "crates/stapes-models/tests/fixtures/fastconformer"))

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


def sentencepiece_model(pieces, kinds=None):
    """ModelProto bytes: pieces (type 2 for <unk>, 1 otherwise unless `kinds` says) and a
    unigram trainer_spec."""
    out = b""
    for i, p in enumerate(pieces):
        kind = 2 if p == "<unk>" else (kinds[i] if kinds else 1)
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


CANARY_DECODER = [
    (r"^decoder\.embed_tokens\.", "transf_decoder._embedding.token_embedding."),
    (r"^decoder\.embedding_layernorm\.", "transf_decoder._embedding.layer_norm."),
    (r"^decoder\.norm\.", "transf_decoder._decoder.final_layer_norm."),
    (r"^decoder\.layers\.", "transf_decoder._decoder.layers."),
    (r"\.input_layernorm\.", ".layer_norm_1."),
    (r"\.post_attention_layernorm\.", ".layer_norm_2."),
    (r"\.final_layernorm\.", ".layer_norm_3."),
    (r"\.self_attn\.", ".first_sub_layer."),
    (r"\.encoder_attn\.", ".second_sub_layer."),
    (r"\.mlp\.fc1\.", ".third_sub_layer.dense_in."),
    (r"\.mlp\.fc2\.", ".third_sub_layer.dense_out."),
    (r"\.q_proj\.", ".query_net."),
    (r"\.k_proj\.", ".key_net."),
    (r"\.v_proj\.", ".value_net."),
    (r"\.o_proj\.", ".out_projection."),
    (r"^proj_out\.", "log_softmax.mlp.layer0."),
]


def canary_nemo_name(k):
    k = k.removeprefix("model.")
    if k.startswith("encoder."):
        return nemo_name(k)
    for pat, rep in CANARY_DECODER:
        k = re.sub(pat, rep, k)
    return k


def write_tar(out, files):
    with tarfile.open(out, "w:") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    print(out, out.stat().st_size)


def canary():
    """The Canary fixture (fastconformer_canary.py) as two `.nemo` archives in NeMo's
    EncDecMultiTaskModel layout: `canary.nemo` with the unified SentencePiece model (as
    canary-1b-v2 ships it) and `canary-agg.nemo` with NeMo's aggregate tokenizer (as
    canary-1b-flash / canary-180m-flash ship it: `spl_tokens` = `<unk>` + the control tokens,
    then `en` = `<unk>` + the text pieces from id 23 on, so every id keeps its meaning except
    22, which becomes `en`'s `<unk>`). Decoder names are the inverse of transformers'
    convert_canary_nemo_to_hf.py mapping (transf_decoder._embedding / _decoder.layers.N.
    {layer_norm_1..3, first/second_sub_layer.{query,key,value}_net/out_projection,
    third_sub_layer.dense_in/out}, log_softmax.mlp.layer0), with the tied output projection
    stored too and the sinusoid-table buffer present (zeros: readers recompute it). The expected text of each
    archive is written to expected_canary_nemo.json: the unified one from `sentencepiece`'s own
    decode, the aggregate one by NeMo's AggregateTokenizer rule (each id's piece from its
    model, joined, `▁` → space; control tokens left out, leading space stripped)."""
    cfg = json.loads((FX / "canary/config.json").read_text())
    enc, dec = cfg["encoder_config"], cfg["decoder_config"]
    hf = load_file(FX / "canary/model.safetensors")
    sd = collections.OrderedDict()
    for k, v in sorted(hf.items()):
        sd[canary_nemo_name(k)] = v
    sd["log_softmax.mlp.layer0.weight"] = sd["transf_decoder._embedding.token_embedding.weight"]
    d = dec["hidden_size"]
    sd["transf_decoder._embedding.position_embedding.pos_enc"] = torch.zeros(dec["max_position_embeddings"], d)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    spm_bytes = (FX / "canary/tokenizer.model").read_bytes()
    sp = sentencepiece.SentencePieceProcessor(model_proto=spm_bytes)
    n_spl = 22
    spl_pieces = [sp.id_to_piece(i) for i in range(n_spl)]
    en_pieces = ["<unk>"] + [sp.id_to_piece(i) for i in range(n_spl + 1, sp.get_piece_size())]
    spl_bytes = sentencepiece_model(spl_pieces, [4] * n_spl)
    en_bytes = sentencepiece_model(en_pieces)
    spl = sentencepiece.SentencePieceProcessor(model_proto=spl_bytes)
    en = sentencepiece.SentencePieceProcessor(model_proto=en_bytes)
    assert spl.get_piece_size() + en.get_piece_size() == sp.get_piece_size() == dec["vocab_size"]
    exp = json.loads((FX / "expected_canary.json").read_text())

    def agg_text(ids):
        toks = []
        for i in ids:
            if i < n_spl:
                p = spl.id_to_piece(i)
                if p.startswith("<|") or p == "<pad>":
                    continue
                toks.append(p)
            else:
                toks.append(en.id_to_piece(i - n_spl))
        t = "".join(toks).replace("\u2581", " ")
        return t[1:] if t.startswith(" ") else t

    def uni_text(ids):
        return sp.decode([i for i in ids if i > 21])

    e2e = exp["results"]["end_to_end_jfk"]
    texts = {"canary.nemo": {k: uni_text(e2e[k]) for k in ("generated", "beam4")},
             "canary-agg.nemo": {k: agg_text(e2e[k]) for k in ("generated", "beam4")}}
    assert texts["canary.nemo"]["generated"] == e2e["text"]
    (FX / "expected_canary_nemo.json").write_text(json.dumps({"sentencepiece": sentencepiece.__version__,
                                                              "texts": texts}, indent=1) + "\n")
    ckpt = io.BytesIO()
    torch.save(sd, ckpt)
    base = {
        "sample_rate": 16000,
        "prompt_format": "canary2",
        "model_defaults": {"asr_enc_hidden": enc["hidden_size"], "lm_enc_hidden": d, "lm_dec_hidden": d},
        "preprocessor": {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                         "sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025,
                         "window_stride": 0.01, "window": "hann", "features": enc["num_mel_bins"],
                         "n_fft": 512, "log": True, "frame_splicing": 1, "dither": 1.0e-05, "pad_to": 0},
        "encoder": {"_target_": "nemo.collections.asr.modules.ConformerEncoder",
                    "feat_in": enc["num_mel_bins"], "feat_out": -1, "n_layers": enc["num_hidden_layers"],
                    "d_model": enc["hidden_size"], "use_bias": True, "subsampling": "dw_striding",
                    "subsampling_factor": enc["subsampling_factor"],
                    "subsampling_conv_channels": enc["subsampling_conv_channels"],
                    "ff_expansion_factor": enc["intermediate_size"] // enc["hidden_size"],
                    "self_attention_model": "rel_pos", "n_heads": enc["num_attention_heads"],
                    "att_context_size": [-1, -1], "xscaling": enc["scale_input"], "untie_biases": True,
                    "pos_emb_max_len": 5000, "conv_kernel_size": enc["conv_kernel_size"],
                    "conv_norm_type": "batch_norm"},
        "transf_encoder": {"num_layers": 0, "hidden_size": d},
        "transf_decoder": {"_target_": "nemo.collections.asr.modules.transformer.get_nemo_transformer",
                           "model_name": None, "pretrained": False,
                           "config_dict": {"max_sequence_length": dec["max_position_embeddings"],
                                           "num_token_types": 0, "embedding_dropout": 0.1,
                                           "learn_positional_encodings": False, "hidden_size": d,
                                           "inner_size": dec["intermediate_size"],
                                           "num_layers": dec["num_hidden_layers"],
                                           "num_attention_heads": dec["num_attention_heads"],
                                           "ffn_dropout": 0.1, "attn_score_dropout": 0.1,
                                           "attn_layer_dropout": 0.1, "hidden_act": dec["hidden_act"],
                                           "pre_ln": True, "vocab_size": None}},
        "head": {"_target_": "nemo.collections.asr.parts.submodules.token_classifier.TokenClassifier",
                 "num_layers": 1, "activation": "relu", "log_softmax": True, "hidden_size": d,
                 "num_classes": dec["vocab_size"]},
        "decoding": {"strategy": "beam", "beam": {"beam_size": 1, "len_pen": 1.0, "max_generation_delta": -1}},
        "target": "nemo.collections.asr.models.aed_multitask_models.EncDecMultiTaskModel",
    }
    uni = dict(base, tokenizer={"dir": None, "type": "bpe", "model_path": "nemo:5a5a_tokenizer.model"})
    write_tar(FX / "canary.nemo", {"./model_config.yaml": yaml.safe_dump(uni, sort_keys=False).encode(),
                                   "./model_weights.ckpt": ckpt.getvalue(),
                                   "./5a5a_tokenizer.model": spm_bytes})
    # `langs` in NeMo's order: spl_tokens first. Keys sort the other way ("en" < "spl_tokens"),
    # so a reader that sorts them gets the ids wrong.
    agg = dict(base, tokenizer={"dir": None, "type": "agg", "langs": {
        "spl_tokens": {"dir": None, "type": "bpe", "model_path": "nemo:1111_tokenizer.model"},
        "en": {"dir": None, "type": "bpe", "model_path": "nemo:2222_tokenizer.model"}},
        "custom_tokenizer": {"_target_": "nemo.collections.common.tokenizers.canary_tokenizer.CanaryTokenizer"}})
    write_tar(FX / "canary-agg.nemo", {"./model_config.yaml": yaml.safe_dump(agg, sort_keys=False).encode(),
                                       "./model_weights.ckpt": ckpt.getvalue(),
                                       "./1111_tokenizer.model": spl_bytes,
                                       "./2222_tokenizer.model": en_bytes})


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["canary"]:
        canary()
    else:
        main()
