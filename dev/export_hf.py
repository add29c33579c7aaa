"""
dev/export_hf.py: a checkpoint of the trainers -> a folder that Hugging Face transformers loads.

    python dev/export_hf.py CHECKPOINT OUTDIR [--tokenizer PATH] [--force]

CHECKPOINT is one of ours (model_XXXXXXXX.bin, any norm mode; doc/formats.md) or llm.c's GPT-2
(float32 or bf16, a pre-mode model). OUTDIR gets:

    model.safetensors   the weights, float32, the vocabulary cut back from Vp to the V real tokens
    config.json         the sizes; generation_config.json: the end-of-text token, when known
    pre mode            transformers' own GPT-2 (GPT2LMHeadModel): its Conv1D layers hold the
                        weight matrices as (in, out), the transpose of ours; lm_head is tied to
                        the token embedding, so only wte is stored
    post, siamese       modeling_siamese_gpt2.py (copied from dev/hf/), the model written for
                        transformers, named in config.json's auto_map: it loads with
                        AutoModelForCausalLM.from_pretrained(OUTDIR, trust_remote_code=True)
    tokenizer           tokenizer.json and tokenizer_config.json, when the vocabulary is known:
                        the byte-level one (V = 257: the arithmetic data and prepare.py --bytes,
                        GPT-2's ids for the 256 bytes and <|endoftext|>; written with no input), or
                        the one in --tokenizer PATH: a data folder's tokenizer.bin (the token bytes
                        the data scripts wrote, doc/formats.md) or a gpt2.tiktoken file, turned
                        into GPT-2's byte-level BPE (the merges follow from the token order: token
                        i is the merge of the two parts byte-pair encoding with tokens < i gives)

Without --tokenizer a GPT-2-vocabulary model (V = 50257) gets no tokenizer files; GPT-2's own
tokenizer from the Hugging Face Hub is the same vocabulary (AutoTokenizer.from_pretrained("gpt2"),
or tokenizer=gpt2 in lm-eval's --model_args). The numbers are checked against the CPU trainer by
make test-hf (tests/test_hf.py). Needs numpy only; loading the export needs torch and transformers.
Bad input (missing or damaged file, unknown format, a tokenizer of another size, an OUTDIR that
holds files, without --force) ends with one "error: ..." line and exit status 1.
"""

import argparse
import base64
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "data"))
import data_common as dc  # noqa: E402 (dev/data/data_common.py: the byte-level vocabulary)

MODEL_MAGIC, MODEL_VERSION = 20260208, 1
LLMC_MAGIC, LLMC_VERSION_FP32, LLMC_VERSION_BF16 = 20240326, 3, 5
NORM_MODES = ["pre", "post", "siamese"]  # header entry 8 (common/params.h)
EOT_TEXT = "<|endoftext|>"
MODELING_FILE = "modeling_siamese_gpt2.py"
# every file an export writes: with --force, a file of this list left from an earlier export and
# not written this time is removed (a stale tokenizer or model code must not outlive its model)
EXPORT_FILES = ["model.safetensors", "config.json", "generation_config.json", MODELING_FILE,
                "tokenizer.json", "tokenizer_config.json"]


class ExportError(Exception):
    pass


# ----------------------------------------------------------------------------
# reading a checkpoint

def param_shapes(cfg):
    """The 28 tensors of a checkpoint in file order with their shapes (common/params.h,
    fill_param_sizes); the siamese-only LayerNorms have size 0 in the other modes."""
    Vp, maxT, L, C = cfg["Vp"], cfg["maxT"], cfg["L"], cfg["C"]
    S = 1 if cfg["mode"] == "siamese" else 0
    per_sublayer = lambda s: [(f"lnx{s}w", (S * L, C)), (f"lnx{s}b", (S * L, C)), (f"lny{s}w", (S * L, C)),
                              (f"lny{s}b", (S * L, C)), (f"ln{s}w", (L, C)), (f"ln{s}b", (L, C))]
    return ([("wte", (Vp, C)), ("wpe", (maxT, C))] + per_sublayer(1) +
            [("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C))] +
            per_sublayer(2) +
            [("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
             ("lnfxw", (S * C,)), ("lnfxb", (S * C,)), ("lnfyw", (S * C,)), ("lnfyb", (S * C,)),
             ("lnfw", (C,)), ("lnfb", (C,))])


def read_checkpoint(path):
    """(cfg, {name: float32 array}) of our checkpoint or llm.c's, every field checked as
    common/params.h checks it."""
    if not os.path.isfile(path):
        raise ExportError(f"{path}: no such file")
    size = os.path.getsize(path)
    if size < 1024:
        raise ExportError(f"{path}: file is truncated ({size} bytes, smaller than the header)")
    header = np.fromfile(path, dtype="<i4", count=256)
    bf16 = False
    if header[0] == LLMC_MAGIC:  # llm.c's GPT-2: a pre-mode model
        if header[1] not in (LLMC_VERSION_FP32, LLMC_VERSION_BF16):
            raise ExportError(f"{path}: llm.c checkpoint version {header[1]} is not supported (3: float32, 5: bf16)")
        bf16 = header[1] == LLMC_VERSION_BF16
        mode = 0
    elif header[0] == MODEL_MAGIC:
        if header[1] != MODEL_VERSION:
            raise ExportError(f"{path}: unsupported checkpoint version {header[1]} (expected {MODEL_VERSION})")
        mode = int(header[8])
        if not 0 <= mode < len(NORM_MODES):
            raise ExportError(f"{path}: unknown norm mode {mode} in header")
    else:
        raise ExportError(f"{path} is not a model checkpoint (bad magic {header[0]})")
    cfg = dict(maxT=int(header[2]), V=int(header[3]), L=int(header[4]), NH=int(header[5]), C=int(header[6]),
               Vp=int(header[7]), mode=NORM_MODES[mode])
    if not (1 <= cfg["maxT"] <= 1 << 20 and 1 <= cfg["V"] <= 1 << 24 and 1 <= cfg["L"] <= 1024 and
            cfg["NH"] >= 1 and 1 <= cfg["C"] <= 1 << 16 and cfg["C"] % cfg["NH"] == 0 and
            cfg["V"] <= cfg["Vp"] < cfg["V"] + 128 and cfg["Vp"] % 128 == 0):
        raise ExportError(f"{path}: inconsistent model sizes in header (maxT {cfg['maxT']}, V {cfg['V']}, "
                          f"Vp {cfg['Vp']}, L {cfg['L']}, NH {cfg['NH']}, C {cfg['C']})")
    shapes = param_shapes(cfg)
    n = sum(int(np.prod(shape)) for _, shape in shapes)
    expected = 1024 + (2 if bf16 else 4) * n
    if size != expected:
        raise ExportError(f"{path}: file has {size} bytes but its header describes {expected} (truncated or corrupted)")
    if bf16:  # bf16 is the upper half of a float32
        words = np.fromfile(path, dtype="<u2", offset=1024, count=n)
        flat = (words.astype(np.uint32) << 16).view(np.float32)
    else:
        flat = np.fromfile(path, dtype="<f4", offset=1024, count=n)
    tensors, offset = {}, 0
    for name, shape in shapes:
        count = int(np.prod(shape))
        t = flat[offset:offset + count].reshape(shape)
        offset += count
        bad = np.flatnonzero(~np.isfinite(t))
        if bad.size:
            raise ExportError(f"{path}: parameter tensor {name} holds {'NaN' if np.isnan(t.flat[bad[0]]) else 'Inf'} "
                              f"at element {bad[0]} of {count}; refusing to export this checkpoint")
        tensors[name] = t
    return cfg, tensors


# ----------------------------------------------------------------------------
# the weights under transformers' names

def hf_tensors(cfg, t):
    """{name: array} in the layout the exported model expects. The padded vocabulary rows of wte
    (V..Vp-1, never an input nor a target) are left out."""
    V, L = cfg["V"], cfg["L"]
    out = {"transformer.wte.weight": t["wte"][:V], "transformer.wpe.weight": t["wpe"]}
    for l in range(L):
        p = f"transformer.h.{l}."
        if cfg["mode"] == "pre":  # GPT2LMHeadModel: Conv1D weights are (in, out)
            names = [("ln_1.weight", t["ln1w"][l]), ("ln_1.bias", t["ln1b"][l]),
                     ("attn.c_attn.weight", t["qkvw"][l].T), ("attn.c_attn.bias", t["qkvb"][l]),
                     ("attn.c_proj.weight", t["attprojw"][l].T), ("attn.c_proj.bias", t["attprojb"][l]),
                     ("ln_2.weight", t["ln2w"][l]), ("ln_2.bias", t["ln2b"][l]),
                     ("mlp.c_fc.weight", t["fcw"][l].T), ("mlp.c_fc.bias", t["fcb"][l]),
                     ("mlp.c_proj.weight", t["fcprojw"][l].T), ("mlp.c_proj.bias", t["fcprojb"][l])]
        else:  # modeling_siamese_gpt2.py: nn.Linear, (out, in) as in the checkpoint
            names = [("ln1.weight", t["ln1w"][l]), ("ln1.bias", t["ln1b"][l]),
                     ("attn.qkv.weight", t["qkvw"][l]), ("attn.qkv.bias", t["qkvb"][l]),
                     ("attn.proj.weight", t["attprojw"][l]), ("attn.proj.bias", t["attprojb"][l]),
                     ("ln2.weight", t["ln2w"][l]), ("ln2.bias", t["ln2b"][l]),
                     ("mlp.fc.weight", t["fcw"][l]), ("mlp.fc.bias", t["fcb"][l]),
                     ("mlp.proj.weight", t["fcprojw"][l]), ("mlp.proj.bias", t["fcprojb"][l])]
            if cfg["mode"] == "siamese":
                for s in ("1", "2"):
                    for stream in ("x", "y"):
                        names += [(f"ln{stream}{s}.weight", t[f"ln{stream}{s}w"][l]),
                                  (f"ln{stream}{s}.bias", t[f"ln{stream}{s}b"][l])]
        out.update((p + name, value) for name, value in names)
    final = "ln_f" if cfg["mode"] == "pre" else "lnf"
    out[f"transformer.{final}.weight"], out[f"transformer.{final}.bias"] = t["lnfw"], t["lnfb"]
    if cfg["mode"] == "siamese":
        for stream in ("x", "y"):
            out[f"transformer.lnf{stream}.weight"] = t[f"lnf{stream}w"]
            out[f"transformer.lnf{stream}.bias"] = t[f"lnf{stream}b"]
    return out


def write_safetensors(path, tensors):
    """The safetensors format: an 8-byte little-endian header length, a JSON header naming each
    tensor's dtype, shape and byte range in the data that follows (no gaps), then the data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        nbytes = t.size * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------
# the tokenizer

def byte_level_chars():
    """GPT-2's byte-level alphabet: the character that stands for each byte in its BPE vocabulary.
    The 188 printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF), whose single-byte tokens are ids
    0..187, stand for themselves; the other 68 (ids 188..255) for U+0100, U+0101, ... in byte order."""
    ids = dc.byte_token_table()
    return {b: chr(b) if ids[b] < 188 else chr(256 + int(ids[b]) - 188) for b in range(256)}


def byte_vocabulary():
    """The 257-token byte-level vocabulary of common/arithmetic.h and dev/data/prepare.py --bytes
    (dev/data/data_common.py): (token bytes by id, end-of-text id)."""
    enc = dc.ByteEncoding()
    return [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)], enc.eot_token


def read_tokenizer(path):
    """(token bytes by id, end-of-text id) from a tokenizer.bin (doc/formats.md, "Tokenizer") or a
    .tiktoken file (one "base64-bytes rank" line per token; <|endoftext|> follows the last rank)."""
    if not os.path.isfile(path):
        raise ExportError(f"--tokenizer {path}: no such file")
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4") if len(data) >= 1024 else None
    if header is not None and header[0] == dc.TOKENIZER_MAGIC:
        if header[1] != dc.TOKENIZER_VERSION:
            raise ExportError(f"{path}: tokenizer version {header[1]} is not supported (expected {dc.TOKENIZER_VERSION})")
        V, eot = int(header[2]), int(header[3])
        tokens, pos = [], 1024
        for i in range(V):
            if pos >= len(data) or pos + 1 + data[pos] > len(data):
                raise ExportError(f"{path}: truncated at token {i} of {V}")
            tokens.append(data[pos + 1:pos + 1 + data[pos]])
            pos += 1 + data[pos]
        if pos != len(data) or not 0 <= eot < V:
            raise ExportError(f"{path}: {len(data) - pos} bytes after the last token, or end-of-text id {eot} outside 0..{V - 1}")
        return tokens, eot
    ranks = {}
    try:
        for line in data.decode("ascii").splitlines():
            if line.strip():
                token, rank = line.split()
                ranks[int(rank)] = base64.b64decode(token, validate=True)
    except (UnicodeDecodeError, ValueError) as e:
        raise ExportError(f"{path}: neither a tokenizer.bin (magic {dc.TOKENIZER_MAGIC}) nor a tiktoken file ({e})") from None
    if sorted(ranks) != list(range(len(ranks))):
        raise ExportError(f"{path}: the tiktoken ranks are not 0..{len(ranks) - 1}")
    return [ranks[i] for i in range(len(ranks))] + [EOT_TEXT.encode()], len(ranks)


def bpe_merges(tokens, eot, path):
    """The merges of a byte-level BPE whose tokens are numbered in merge order (GPT-2's ids are its
    merge ranks): every single byte is a token, and each longer token i is made by one merge, of
    the two parts that byte-pair encoding its bytes with the tokens below i alone ends in."""
    rank = {}
    for i, t in enumerate(tokens):
        if i != eot:
            if t in rank:
                raise ExportError(f"{path}: tokens {rank[t]} and {i} have the same bytes")
            rank[t] = i
    missing = [b for b in range(256) if bytes([b]) not in rank]
    if missing:
        raise ExportError(f"{path}: byte 0x{missing[0]:02x} has no token of its own; not a byte-level BPE vocabulary")
    merges = []
    for i, t in enumerate(tokens):
        if i == eot or len(t) == 1:
            continue
        parts = [t[j:j + 1] for j in range(len(t))]
        while len(parts) > 2:
            best = min(range(len(parts) - 1), key=lambda j: rank.get(parts[j] + parts[j + 1], len(tokens)))
            if rank.get(parts[best] + parts[best + 1], len(tokens)) >= i:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        if len(parts) != 2 or rank.get(parts[0], i) >= i or rank.get(parts[1], i) >= i:
            raise ExportError(f"{path}: token {i} ({t!r}) is not the merge of two earlier tokens; not a BPE vocabulary in merge order")
        merges.append((parts[0], parts[1]))
    return merges


def tokenizer_files(tokens, eot, max_len, path):
    """tokenizer.json (the tokenizers library's format: GPT-2's byte-level pre-tokenizer, a BPE model,
    <|endoftext|> as a special token) and tokenizer_config.json, as JSON-ready dicts."""
    chars = byte_level_chars()
    text = lambda b: "".join(chars[x] for x in b)
    merges = bpe_merges(tokens, eot, path)
    vocab = {text(t): i for i, t in enumerate(tokens) if i != eot}
    vocab[EOT_TEXT] = eot
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eot, "content": EOT_TEXT, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [f"{text(a)} {text(b)}" for a, b in merges]},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOT_TEXT, "eos_token": EOT_TEXT,
              "unk_token": EOT_TEXT, "model_max_length": max_len, "add_prefix_space": False,
              "clean_up_tokenization_spaces": False}
    return tokenizer, config


# ----------------------------------------------------------------------------
# the export

def model_config(cfg, eot):
    """config.json of the export."""
    if cfg["mode"] == "pre":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": cfg["V"],
                "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"], "n_embd": cfg["C"], "n_layer": cfg["L"],
                "n_head": cfg["NH"], "n_inner": None, "activation_function": "gelu_new",  # GELU, tanh approximation
                "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
                "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                "tie_word_embeddings": True, "use_cache": True, "bos_token_id": eot, "eos_token_id": eot,
                "torch_dtype": "float32"}
    module = MODELING_FILE[:-3]
    return {"architectures": ["SiameseGPT2ForCausalLM"], "model_type": "siamese_gpt2",
            "auto_map": {"AutoConfig": f"{module}.SiameseGPT2Config",
                         "AutoModelForCausalLM": f"{module}.SiameseGPT2ForCausalLM"},
            "norm_mode": cfg["mode"], "vocab_size": cfg["V"], "max_position_embeddings": cfg["maxT"],
            "hidden_size": cfg["C"], "num_hidden_layers": cfg["L"], "num_attention_heads": cfg["NH"],
            "layer_norm_eps": 1e-5, "use_cache": True, "bos_token_id": eot, "eos_token_id": eot,
            "torch_dtype": "float32"}


def export(checkpoint, outdir, tokenizer_path=None, force=False):
    """Writes the export of `checkpoint` into `outdir`; returns a few lines saying what it wrote."""
    if os.path.exists(outdir) and not os.path.isdir(outdir):
        raise ExportError(f"{outdir} exists and is not a folder")
    if os.path.isdir(outdir) and os.listdir(outdir) and not force:
        raise ExportError(f"{outdir} is not empty (--force writes into it, replacing an earlier export)")
    cfg, tensors = read_checkpoint(checkpoint)
    V = cfg["V"]
    if tokenizer_path is not None:
        tokens, eot = read_tokenizer(tokenizer_path)
        if len(tokens) != V:
            raise ExportError(f"--tokenizer {tokenizer_path} has {len(tokens)} tokens, the model {V}")
        source = tokenizer_path
    elif V == dc.BYTE_VOCAB_SIZE:
        (tokens, eot), source = byte_vocabulary(), "the byte-level vocabulary (V = 257)"
    else:
        tokens, source = None, None
        eot = dc.GPT2_EOT if V == dc.GPT2_VOCAB_SIZE else None
    files = {"config.json": model_config(cfg, eot)}
    if eot is not None:
        files["generation_config.json"] = {"bos_token_id": eot, "eos_token_id": eot}
    if tokens is not None:
        files["tokenizer.json"], files["tokenizer_config.json"] = tokenizer_files(tokens, eot, cfg["maxT"],
                                                                                  tokenizer_path or "byte vocabulary")
    created = not os.path.exists(outdir)
    os.makedirs(outdir, exist_ok=True)
    # everything is written into a hidden folder inside OUTDIR, then moved into place: an export
    # that fails on the way leaves OUTDIR as it was (and removes it if it made it)
    work = tempfile.mkdtemp(prefix=".export_hf_", dir=outdir)
    try:
        write_safetensors(os.path.join(work, "model.safetensors"), hf_tensors(cfg, tensors))
        for name, content in files.items():
            with open(os.path.join(work, name), "w") as f:
                json.dump(content, f, indent=1 if name != "tokenizer.json" else None, ensure_ascii=False)
                f.write("\n")
        if cfg["mode"] != "pre":
            shutil.copyfile(os.path.join(HERE, "hf", MODELING_FILE), os.path.join(work, MODELING_FILE))
        written = sorted(os.listdir(work))
        for name in EXPORT_FILES:
            if name not in written and os.path.exists(os.path.join(outdir, name)):
                os.remove(os.path.join(outdir, name))
        for name in written:
            os.replace(os.path.join(work, name), os.path.join(outdir, name))
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        if created:
            shutil.rmtree(outdir, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    n = sum(t.size for t in tensors.values())
    lines = [f"exported {checkpoint} ({cfg['mode']} mode, {cfg['L']} layers, C {cfg['C']}, {cfg['NH']} heads, "
             f"V {V} (padded {cfg['Vp']} in the checkpoint), maxT {cfg['maxT']}, {n:,} parameters) to {outdir}: "
             + ", ".join(written)]
    lines.append("load it with transformers: AutoModelForCausalLM.from_pretrained(" + repr(outdir) +
                 (")" if cfg["mode"] == "pre" else ", trust_remote_code=True)"))
    if tokens is not None:
        lines.append(f"tokenizer: from {source}")
    elif V == dc.GPT2_VOCAB_SIZE:
        lines.append("tokenizer: none written (--tokenizer PATH writes one); GPT-2's own is the same vocabulary: "
                     "AutoTokenizer.from_pretrained('gpt2'), or tokenizer=gpt2 in lm-eval's --model_args")
    else:
        lines.append(f"tokenizer: none (a vocabulary of {V} tokens is neither GPT-2's nor the byte-level one)")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description="Export a checkpoint of the trainers for Hugging Face transformers "
                                                 "(see the header of dev/export_hf.py).")
    parser.add_argument("checkpoint", help="model_XXXXXXXX.bin (any norm mode) or an llm.c GPT-2 checkpoint")
    parser.add_argument("outdir", help="the folder to write (created; it must be empty unless --force)")
    parser.add_argument("--tokenizer", help="tokenizer.bin of the training data (or a gpt2.tiktoken): "
                                            "writes tokenizer.json from it")
    parser.add_argument("--force", action="store_true", help="write into a non-empty OUTDIR, replacing an earlier export")
    args = parser.parse_args(argv)
    try:
        for line in export(args.checkpoint, args.outdir, args.tokenizer, args.force):
            print(line)
    except (ExportError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
