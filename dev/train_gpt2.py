"""
The PyTorch reference for SiameseNorm GPT-2: the model the C and CUDA trainers are checked against.

It implements the three norm modes described in dev/MODEL.md exactly:
    pre      x = x + F(LN(x))                       (GPT-2)
    post     x = LN(x + F(x))                       (original Transformer)
    siamese  a = LN_x(x); u = LN_in(a + LN_y(y)); z = F(u); x = a + z/c_l; y = y + z
             with c_l = sqrt(2(l+1)), and at the end h = LN_f(LN_fx(x) + LN_fy(y))

It does three jobs:
1. `--write_dumps DIR`: writes, for every norm mode, a tiny model checkpoint (LayerNorms and biases
   perturbed) and a debug-state dump computed in float64 (tokens, targets, every forward activation,
   logits, loss, the stream gradients at every sublayer boundary, every parameter gradient, the
   losses and gradient norms of 10 AdamW steps) and, per checked number, PyTorch float32's error
   on it (the yardstick of the C tests' tolerance); then the same for siamese_trained, the siamese
   model trained 200 steps on the dump batch. These are the files test_gpt2.c / test_gpt2.cu compare against. The
   dumps in data/test were made with
       python dev/train_gpt2.py --write_dumps data/test
   `--check_dumps DIR` checks dumps that `./test_gpt2 --write DIR SHAPE` wrote against this model.
2. Training on llm.c token shards, on CPU or CUDA, fp32 or bf16 autocast, optionally compiled: the
   PyTorch peer in benchmarks. Example:
       python dev/train_gpt2.py -i "data/tinyshakespeare/*train*.bin" -j "data/tinyshakespeare/*val*.bin" -e d6 -N siamese
3. Reading and writing the project's checkpoint format (see doc/formats.md), so checkpoints move between
   the three implementations: `-e path/to/model.bin` loads one, `-o DIR` writes model_XXXXXXXX.bin.
"""

import argparse
import copy
import glob
import math
import os
import re
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
from progress import Progress  # noqa: E402 (dev/data/progress.py, standard library only)
import torch.nn as nn
import torch.nn.functional as F

# the norm modes in checkpoint order (common/params.h). Each place that depends on the mode
# dispatches explicitly and raises on a mode it does not know (dev/MODEL.md, "Adding a norm mode").
NORM_MODES = ["pre", "post", "siamese"]
TWO_STREAMS = {"pre": False, "post": False, "siamese": True}  # a second stream Y and its LayerNorms
assert list(TWO_STREAMS) == NORM_MODES, "one entry per norm mode"


def unknown_mode(mode):
    return ValueError(f"unknown norm mode {mode!r} (expected one of {', '.join(NORM_MODES)})")
MODEL_MAGIC, MODEL_VERSION = 20260208, 1
DUMP_MAGIC, DUMP_VERSION = 20260209, 4
SHARD_MAGIC, SHARD_VERSION = 20240520, 1

# -----------------------------------------------------------------------------
# the model


class GPTConfig:
    def __init__(self, block_size=1024, vocab_size=50257, padded_vocab_size=50304,
                 n_layer=12, n_head=12, n_embd=768, norm_mode="siamese"):
        assert norm_mode in NORM_MODES, f"unknown norm mode {norm_mode}"
        assert n_embd % n_head == 0 and padded_vocab_size % 128 == 0 and padded_vocab_size >= vocab_size
        self.block_size, self.vocab_size, self.padded_vocab_size = block_size, vocab_size, padded_vocab_size
        self.n_layer, self.n_head, self.n_embd, self.norm_mode = n_layer, n_head, n_embd, norm_mode

    @staticmethod
    def from_depth(depth, norm_mode, vocab_size=50257, block_size=1024, channels=0, heads=0):
        """dN: GPT-2's sizes for 12/24/36/48 layers, otherwise C = 64*N and NH = N; dNcC and dNcChH
        (channels, heads) as the C trainer's -e (common/args.h)."""
        widths = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
        C, NH = widths.get(depth, (64 * depth, depth))
        if channels:
            C, NH = channels, heads or max(1, channels // 64)
        Vp = (vocab_size + 127) // 128 * 128
        return GPTConfig(block_size, vocab_size, Vp, depth, NH, C, norm_mode)


class CausalSelfAttention(nn.Module):
    def __init__(self, config, use_sdpa):
        super().__init__()
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # qkv: rows [q | k | v], heads contiguous
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.use_sdpa = use_sdpa

    def forward(self, u, record=None):
        B, T, C = u.size()
        qkv = self.c_attn(u)
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the plain formula, used for the reference dumps
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=u.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        if record is not None:
            record += [("qkv", qkv), ("atty", y)]
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, u, record=None):
        fch = self.c_fc(u)
        fch_gelu = F.gelu(fch, approximate="tanh")
        if record is not None:
            record += [("fch", fch), ("fch_gelu", fch_gelu)]
        return self.c_proj(fch_gelu)


class Block(nn.Module):
    """One layer: an attention sublayer then an MLP sublayer, wired by the norm mode."""

    def __init__(self, config, layer_idx, use_sdpa):
        super().__init__()
        C = config.n_embd
        self.mode = config.norm_mode
        self.attn = CausalSelfAttention(config, use_sdpa)
        self.mlp = MLP(config)
        self.ln1 = nn.LayerNorm(C)  # pre: LN before attn; post: LN after the add; siamese: lnin1
        self.ln2 = nn.LayerNorm(C)
        if TWO_STREAMS[self.mode]:
            self.lnx1, self.lny1 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.lnx2, self.lny2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c = math.sqrt(2 * (layer_idx + 1))  # c_l, the X-stream scale (siamese only)
        self.layer_idx = layer_idx

    def sublayer(self, s, x, y, record=None):
        """Sublayer s (0 attention, 1 MLP): the streams after it. `record`, when given, collects the
        activations in the order of the debug-state dump (doc/formats.md, "Debug-state dump")."""
        rec = (lambda name, t: record.append((name, t))) if record is not None else (lambda name, t: None)
        f = self.attn if s == 0 else self.mlp
        ln = self.ln1 if s == 0 else self.ln2
        if self.mode == "pre":
            u = ln(x)
            rec("u", u)
            z = f(u, record)
            x = x + z
            rec("z", z)
            rec("x", x)
        elif self.mode == "post":
            z = f(x, record)
            r = x + z
            x = ln(r)
            rec("z", z)
            rec("x+z", r)
            rec("x", x)
        elif self.mode == "siamese":
            lnx, lny = (self.lnx1, self.lny1) if s == 0 else (self.lnx2, self.lny2)
            a = lnx(x)                    # normalise the Post-Norm stream X
            ly = lny(y)
            sm = a + ly
            u = ln(sm)                    # the block input sees both streams
            for name, t in (("a", a), ("LN(y)", ly), ("a+LN(y)", sm), ("u", u)):
                rec(name, t)
            z = f(u, record)              # the shared block runs once
            x, y = a + z / self.c, y + z  # X gets z/c_l, Y gets z whole
            for name, t in (("z", z), ("x", x), ("y", y)):
                rec(name, t)
        else:
            raise unknown_mode(self.mode)
        return x, y

    def forward(self, x, y, record=None, boundaries=None):
        for s in (0, 1):
            start = len(record) if record is not None else 0
            x, y = self.sublayer(s, x, y, record)
            if record is not None:  # names as test_gpt2 prints them: "layer 1 attn LN(y)"
                place = f"layer {self.layer_idx} {('attn', 'mlp')[s]}"
                record[start:] = [(f"{place} {name}", t) for name, t in record[start:]]
            if boundaries is not None:
                boundaries.append((x, y))
        return x, y


class GPT(nn.Module):
    def __init__(self, config, use_sdpa=True):
        super().__init__()
        self.config = config
        C = config.n_embd
        self.wte = nn.Embedding(config.padded_vocab_size, C)  # tied with the output layer
        self.wpe = nn.Embedding(config.block_size, C)
        self.h = nn.ModuleList([Block(config, l, use_sdpa) for l in range(config.n_layer)])
        self.lnf = nn.LayerNorm(C)
        if TWO_STREAMS[config.norm_mode]:
            self.lnfx, self.lnfy = nn.LayerNorm(C), nn.LayerNorm(C)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """GPT-2's recipe for every mode: N(0, 0.02), the two residual output projections
        N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 and bias 0; padded vocab rows 0."""
        std_proj = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, std_proj)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif ".ln" in name or name.startswith("ln"):
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            else:
                nn.init.zeros_(p)
        self.wte.weight[self.config.vocab_size:].zero_()

    def forward(self, idx, targets=None, record=None, boundaries=None):
        """logits (B, T, Vp) and the mean loss. For the debug-state dump: `record` collects the
        activations in forward order as (name, tensor); `boundaries` the streams (x, y) at every
        sublayer boundary (y is None outside siamese mode)."""
        B, T = idx.size()
        assert T <= self.config.block_size, f"sequence length {T} > block size {self.config.block_size}"
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        if record is not None:
            record.append(("embedding e", x))
        # both streams start as the embedding (copies, so that each stream has its own gradient)
        x, y = (x.clone(), x.clone()) if TWO_STREAMS[self.config.norm_mode] else (x, None)
        if boundaries is not None:
            boundaries.append((x, y))
        for block in self.h:
            x, y = block(x, y, record, boundaries)
        mode = self.config.norm_mode
        if mode in ("pre", "post"):
            h = self.lnf(x)
        elif mode == "siamese":
            merged = self.lnfx(x) + self.lnfy(y)  # merge the streams, then the final LN
            h = self.lnf(merged)
            if record is not None:
                record.append(("final LN(x)+LN(y)", merged))
        else:
            raise unknown_mode(mode)
        if record is not None:
            record.append(("final h", h))
        logits = F.linear(h, self.wte.weight)  # (B, T, Vp)
        loss = None
        if targets is not None:
            V = self.config.vocab_size
            lg = logits[..., :V].reshape(-1, V)
            loss = F.cross_entropy(lg if lg.dtype == torch.float64 else lg.float(), targets.reshape(-1))
        return logits, loss

    def optimizer_groups(self, weight_decay):
        """AdamW decay on the matrices and embeddings (dim >= 2) only, as nanoGPT and llm.c's GPU trainer."""
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]

    # -- the checkpoint layout (doc/formats.md): 28 tensors, per-layer ones stacked over layers ----------
    def layout(self):
        """[(name, [tensors])]: the checkpoint tensors in order; a list of L tensors means stacked
        per layer, an empty list means a tensor of size 0 (siamese-only tensors in pre/post)."""
        siamese = TWO_STREAMS[self.config.norm_mode]
        per_layer = lambda get: [get(b) for b in self.h]
        per_layer_if = lambda get: per_layer(get) if siamese else []
        lay = [("wte", [self.wte.weight]), ("wpe", [self.wpe.weight])]
        for s in ("1", "2"):
            lay += [(f"lnx{s}w", per_layer_if(lambda b: getattr(b, "lnx" + s).weight)),
                    (f"lnx{s}b", per_layer_if(lambda b: getattr(b, "lnx" + s).bias)),
                    (f"lny{s}w", per_layer_if(lambda b: getattr(b, "lny" + s).weight)),
                    (f"lny{s}b", per_layer_if(lambda b: getattr(b, "lny" + s).bias)),
                    (f"ln{s}w", per_layer(lambda b: getattr(b, "ln" + s).weight)),
                    (f"ln{s}b", per_layer(lambda b: getattr(b, "ln" + s).bias))]
            if s == "1":
                lay += [("qkvw", per_layer(lambda b: b.attn.c_attn.weight)), ("qkvb", per_layer(lambda b: b.attn.c_attn.bias)),
                        ("attprojw", per_layer(lambda b: b.attn.c_proj.weight)), ("attprojb", per_layer(lambda b: b.attn.c_proj.bias))]
            else:
                lay += [("fcw", per_layer(lambda b: b.mlp.c_fc.weight)), ("fcb", per_layer(lambda b: b.mlp.c_fc.bias)),
                        ("fcprojw", per_layer(lambda b: b.mlp.c_proj.weight)), ("fcprojb", per_layer(lambda b: b.mlp.c_proj.bias))]
        lay += [("lnfxw", [self.lnfx.weight] if siamese else []), ("lnfxb", [self.lnfx.bias] if siamese else []),
                ("lnfyw", [self.lnfy.weight] if siamese else []), ("lnfyb", [self.lnfy.bias] if siamese else []),
                ("lnfw", [self.lnf.weight]), ("lnfb", [self.lnf.bias])]
        return lay


def flat_tensors(model, grads=False):
    """All parameters (or their gradients) as one float32 numpy array in checkpoint order."""
    parts = []
    for _, tensors in model.layout():
        for t in tensors:
            t = t.grad if grads else t
            parts.append(t.detach().float().cpu().reshape(-1))
    return torch.cat(parts).numpy()


def model_header(config):
    header = np.zeros(256, dtype=np.int32)
    header[:9] = [MODEL_MAGIC, MODEL_VERSION, config.block_size, config.vocab_size, config.n_layer,
                  config.n_head, config.n_embd, config.padded_vocab_size, NORM_MODES.index(config.norm_mode)]
    return header


def write_atomic(path, chunks):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_model(model, path):
    write_atomic(path, [model_header(model.config), flat_tensors(model)])


def read_model(path, use_sdpa=True):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if len(header) != 256 or header[0] != MODEL_MAGIC:
            sys.exit(f"error: {path} is not a model checkpoint (bad magic)")
        if header[1] != MODEL_VERSION:
            sys.exit(f"error: {path}: unsupported checkpoint version {header[1]}")
        if not 0 <= header[8] < len(NORM_MODES):
            sys.exit(f"error: {path}: unknown norm mode {header[8]}")
        config = GPTConfig(int(header[2]), int(header[3]), int(header[7]), int(header[4]), int(header[5]),
                           int(header[6]), NORM_MODES[header[8]])
        data = np.frombuffer(f.read(), dtype=np.float32)
    model = GPT(config, use_sdpa)
    n = sum(t.numel() for _, ts in model.layout() for t in ts)
    if data.size != n:
        sys.exit(f"error: {path}: expected {n} parameters, file holds {data.size}")
    offset = 0
    with torch.no_grad():
        for _, tensors in model.layout():
            for t in tensors:
                t.copy_(torch.from_numpy(data[offset:offset + t.numel()].copy()).view_as(t))
                offset += t.numel()
    return model

# -----------------------------------------------------------------------------
# reference dumps for test_gpt2.c / test_gpt2.cu

# the tiny configuration of the stored dumps: 3 layers, head size 16, a vocabulary padded 200 -> 256
DUMP_CONFIG = dict(block_size=64, vocab_size=200, padded_vocab_size=256, n_layer=3, n_head=2, n_embd=32)
DUMP_B, DUMP_T, DUMP_STEPS = 2, 32, 10
# the AdamW settings of the 10 test steps (stored in the dump header, read by the C tests)
DUMP_LR, DUMP_BETA1, DUMP_BETA2, DUMP_EPS, DUMP_WD, DUMP_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.7


@torch.no_grad()
def perturb(model, seed):
    """Makes every parameter tensor distinct: a fresh model's LayerNorms are the identity (weight 1,
    bias 0) and its biases 0, so a trainer that used one LayerNorm or bias in place of another would
    compute the same numbers. Seeded: LayerNorm weights 1 + N(0, 0.2), LayerNorm biases N(0, 0.2),
    linear biases N(0, 0.05). The padded vocabulary rows of wte stay 0."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if p.dim() != 1:
            continue
        is_ln = ".ln" in name or name.startswith("ln")
        noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
        if is_ln and name.endswith("weight"):
            p.add_(0.2 * noise)
        else:
            p.add_((0.2 if is_ln else 0.05) * noise)


def recorded_forward_backward(model, x, y):
    """Forward and backward, keeping the activations (record) and the streams at every sublayer
    boundary with their gradients (boundaries: (x, y) pairs, .grad set)."""
    record, boundaries = [], []
    logits, loss = model(x, y, record, boundaries)
    for bx, by in boundaries:
        bx.retain_grad()
        if by is not None:
            by.retain_grad()
    loss.backward()
    return logits, loss, record, boundaries


def tensors_of_run(model, x, y, steps):
    """What a dump holds, computed by `model` in its own dtype, as float64 numpy arrays: (name, array)
    pairs in the dump's order (forward tensors with the logits last, the loss, the stream gradients in
    backward order, one entry per checkpoint tensor, the step losses, the step gradient norms), and the
    parts the file stores."""
    V = model.config.vocab_size
    f64 = lambda t: t.detach().to(torch.float64).numpy()
    logits, loss, record, boundaries = recorded_forward_backward(model, x, y)
    named = [(name, f64(t)) for name, t in record] + [("final logits", f64(logits)[..., :V])]
    named.append(("loss", np.array([loss.item()])))
    stream_grads = []
    for b in reversed(range(len(boundaries))):  # backward order: the last boundary first
        for name, t in zip(("dx", "dy"), boundaries[b]):
            if t is not None:
                stream_grads.append(f64(t.grad))
                named.append((f"boundary {b} {name}", stream_grads[-1]))
    for name, tensors in model.layout():
        named.append((name, np.concatenate([f64(t.grad).ravel() for t in tensors]) if tensors else np.zeros(0)))
    grads = flat_tensors(model, grads=True)
    # the AdamW steps on the same batch, with clipping, as the C test takes them
    opt = torch.optim.AdamW(model.optimizer_groups(DUMP_WD), lr=DUMP_LR, betas=(DUMP_BETA1, DUMP_BETA2),
                            eps=DUMP_EPS, foreach=False, fused=False)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        _, loss_s = model(x, y)
        loss_s.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), DUMP_CLIP).item())
        opt.step()
        losses.append(loss_s.item())
        named.append((f"step {step}", np.array([losses[-1]])))
    # the global L2 norm of all parameter gradients of each step, before clipping
    named += [(f"norm {step}", np.array([norm])) for step, norm in enumerate(norms)]
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)
    parts = dict(logits=f32(f64(logits)), loss=np.float32(loss.item()), grads=grads, losses=f32(losses),
                 norms=f32(norms), acts=[f32(f64(t)) for _, t in record], stream_grads=[f32(g) for g in stream_grads],
                 record_names=[n for n, _ in record])
    return named, parts


def yardstick(ours, ref):
    """The error measure of the C tests on float64 arrays; for one number (the losses) relative."""
    if ref.size == 1:
        return abs(float(ours[0]) - float(ref[0])) / abs(float(ref[0]))
    return scaled_max_error(ours, ref)


def write_dump(model, dirpath, x, y, note=""):
    """Writes model.bin (float32) and debug_state.bin into dirpath: the reference computed in float64
    from the float32 parameters (stored as float32, so that the reference carries almost no rounding
    error of its own), and per checked number its yardstick: the error of PyTorch's own float32
    computation on the same model and batch against that reference, in the C tests' measure."""
    os.makedirs(dirpath, exist_ok=True)
    write_model(model, os.path.join(dirpath, "model.bin"))
    model64 = copy.deepcopy(model).double()  # exact: every float32 parameter is a float64
    model32 = copy.deepcopy(model).float()
    named64, parts = tensors_of_run(model64, x, y, DUMP_STEPS)
    named32, _ = tensors_of_run(model32, x, y, DUMP_STEPS)
    assert [n for n, _ in named64] == [n for n, _ in named32]
    yards = np.array([yardstick(a32, a64) if a64.size else 0.0 for (_, a64), (_, a32) in zip(named64, named32)],
                     dtype=np.float32)
    cfg = model.config
    acts, stream_grads = parts["acts"], parts["stream_grads"]
    header = np.zeros(256, dtype=np.int32)
    header[:14] = [DUMP_MAGIC, DUMP_VERSION, DUMP_B, DUMP_T, cfg.vocab_size, cfg.padded_vocab_size, DUMP_STEPS,
                   NORM_MODES.index(cfg.norm_mode), len(acts), len(stream_grads), cfg.n_layer, cfg.n_embd,
                   cfg.n_head, yards.size]
    hyper = [DUMP_LR, DUMP_BETA1, DUMP_BETA2, DUMP_EPS, DUMP_WD, DUMP_CLIP]
    header[16:22] = np.frombuffer(struct.pack("<6f", *hyper), dtype=np.int32)
    write_atomic(os.path.join(dirpath, "debug_state.bin"),
                 [header, x.numpy().astype(np.int32), y.numpy().astype(np.int32), parts["logits"],
                  np.array([parts["loss"]], dtype=np.float32), parts["grads"], parts["losses"], parts["norms"]]
                 + acts + stream_grads + [yards])
    losses, norms = parts["losses"], parts["norms"]
    worst = int(np.argmax(yards))
    print(f"{os.path.basename(dirpath):16s} {note}loss {parts['loss']:.6f} | step losses {losses[0]:.4f} -> "
          f"{losses[-1]:.4f} | grad norms {' '.join(f'{n:.3f}' for n in norms)} | {parts['grads'].size} params "
          f"| {len(acts)} activations: {', '.join(parts['record_names'][:6])} ... | torch fp32 error: worst "
          f"{yards[worst]:.1e} ({named64[worst][0]})")
    return named64, named32, yards


def train_on_batch(model, x, y, steps, lr):
    """Trains a dump model on one batch in float64 (so the result does not depend on float32
    summation orders): AdamW with the dumps' betas, weight decay and clipping, the learning rate
    decaying from lr to 0 on a cosine. Returns the model with float32 parameters and the last loss."""
    model.double()
    opt = torch.optim.AdamW(model.optimizer_groups(DUMP_WD), lr=lr, betas=(DUMP_BETA1, DUMP_BETA2), eps=DUMP_EPS,
                            foreach=False, fused=False)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), DUMP_CLIP)
        opt.step()
    return model.float(), loss.item()


# the trained dump: the perturbed siamese model trained TRAINED_STEPS steps on the dump batch. Its
# gradients on that batch are partly cancellation (terms of one sign summed against terms of the
# other to a small total), most of all the LayerNorm biases of the y stream, where PyTorch's own
# float32 error against float64 reaches 4e-5 of the tensor's scale.
TRAINED_MODE, TRAINED_STEPS, TRAINED_LR = "siamese", 200, 3e-4


def write_dumps(outdir):
    """For every norm mode <mode>/: a tiny model with perturbed LayerNorms and biases on a random
    batch; then siamese_trained/: the perturbed siamese model trained TRAINED_STEPS AdamW steps on that
    batch (train_on_batch), on the same batch."""
    torch.use_deterministic_algorithms(True)
    g = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, DUMP_CONFIG["vocab_size"], (DUMP_B, DUMP_T + 1), generator=g)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    progress = Progress("writing dumps", total=len(NORM_MODES) + 1, unit="dumps", every=0)
    for mode_index, mode in enumerate(NORM_MODES):
        torch.manual_seed(1337)
        model = GPT(GPTConfig(norm_mode=mode, **DUMP_CONFIG), use_sdpa=False)
        perturb(model, 2000 + mode_index)
        write_dump(model, os.path.join(outdir, mode), x, y)
        progress.update()
    torch.manual_seed(1337)
    model = GPT(GPTConfig(norm_mode=TRAINED_MODE, **DUMP_CONFIG), use_sdpa=False)
    perturb(model, 2000 + NORM_MODES.index(TRAINED_MODE))
    model, last = train_on_batch(model, x, y, TRAINED_STEPS, TRAINED_LR)
    write_dump(model, os.path.join(outdir, TRAINED_MODE + "_trained"), x, y,
               f"(trained {TRAINED_STEPS} steps, last training loss {last:.4f}) ")
    progress.update()
    progress.close()


def scaled_max_error(ours, ref):
    """max|ours - ref| / max|ref|, the error measure of the C tests (common/debug_state.h)."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = np.abs(ref).max()
    err = np.abs(np.asarray(ours, dtype=np.float64) - ref).max()
    return err / scale if scale > 0 else err


def check_dumps(dumpdir):
    """Checks dumps written by another implementation (`./test_gpt2 --write DIR SHAPE`) against this
    model in float64, with test_gpt2.c's error measure and tolerances. Returns the number of failures."""
    torch.use_deterministic_algorithms(True)
    tol = dict(forward=1e-5, loss=1e-6, backward=1e-5, grads=1e-5, steps=1e-6, norms=1e-6)
    failures = 0
    progress = Progress("checking dumps", total=len(NORM_MODES), unit="modes", every=0)
    for mode_index, mode in enumerate(NORM_MODES):
        model = read_model(os.path.join(dumpdir, mode, "model.bin"), use_sdpa=False).double()
        cfg = model.config
        path = os.path.join(dumpdir, mode, "debug_state.bin")
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(1024), dtype=np.int32)
            data = f.read()
        if header[0] != DUMP_MAGIC or header[1] != DUMP_VERSION:
            sys.exit(f"error: {path}: not a version {DUMP_VERSION} debug-state dump")
        B, T, steps = int(header[2]), int(header[3]), int(header[6])
        lr, beta1, beta2, eps, wd, clip = struct.unpack("<6f", header[16:22].tobytes())
        ints = np.frombuffer(data, dtype=np.int32, count=2 * B * T)
        floats = np.frombuffer(data, dtype=np.float32, offset=8 * B * T)
        x = torch.from_numpy(ints[:B * T].astype(np.int64)).view(B, T)
        y = torch.from_numpy(ints[B * T:].astype(np.int64)).view(B, T)
        P = sum(t.numel() for _, ts in model.layout() for t in ts)
        n_logits = B * T * cfg.padded_vocab_size
        pos = 0

        def take(n):
            nonlocal pos
            pos += n
            return floats[pos - n:pos]

        ref_logits, ref_loss, ref_grads, ref_losses, ref_norms = take(n_logits), take(1)[0], take(P), take(steps), take(steps)
        logits, loss, record, boundaries = recorded_forward_backward(model, x, y)
        errs = {k: [] for k in tol}
        for name, t in record:
            errs["forward"].append((scaled_max_error(take(t.numel()), t.detach().numpy().ravel()), name))
        V = cfg.vocab_size
        errs["forward"].append((scaled_max_error(ref_logits.reshape(B * T, -1)[:, :V],
                                                 logits.detach().numpy().reshape(B * T, -1)[:, :V]), "final logits"))
        errs["loss"].append((abs(ref_loss - loss.item()) / abs(loss.item()), "loss"))
        for b in reversed(range(len(boundaries))):
            place = "embedding" if b == 0 else f"after layer {(b - 1) // 2} {('attn', 'mlp')[(b - 1) % 2]}"
            for name, t in zip(("dx", "dy"), boundaries[b]):
                if t is not None:
                    errs["backward"].append((scaled_max_error(take(t.numel()), t.grad.numpy().ravel()), f"{place} {name}"))
        take(int(header[13]))  # the yardsticks (0 in the dumps ./test_gpt2 --write makes)
        if pos != floats.size:
            sys.exit(f"error: {path}: {floats.size - pos} floats left over (not laid out as this model's dump)")
        offset = 0
        for name, tensors in model.layout():
            n = sum(t.numel() for t in tensors)
            if n:
                ours = torch.cat([t.grad.reshape(-1) for t in tensors]).numpy()
                errs["grads"].append((scaled_max_error(ref_grads[offset:offset + n], ours), name))
            offset += n
        opt = torch.optim.AdamW(model.optimizer_groups(wd), lr=lr, betas=(beta1, beta2), eps=eps, foreach=False, fused=False)
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
            opt.step()
            errs["steps"].append((abs(ref_losses[step] - loss.item()) / abs(loss.item()), f"step {step}"))
            errs["norms"].append((abs(ref_norms[step] - norm) / norm, f"norm {step}"))
        line = []
        for kind, values in errs.items():
            worst, name = max(values, key=lambda e: e[0]) if values else (0.0, "-")
            bad = [n for e, n in values if not e <= tol[kind]]
            failures += len(bad)
            line.append(f"{kind} {worst:.1e} ({name}){' FAIL: ' + ', '.join(bad[:8]) if bad else ''}")
        print(f"{mode:8s} L {cfg.n_layer} C {cfg.n_embd} NH {cfg.n_head} V {V} B {B} T {T} | worst: " + " | ".join(line))
        progress.update()
    progress.close()
    print("all within test_gpt2.c's tolerances" if failures == 0 else f"{failures} tensors, losses or norms over tolerance")
    return failures

# -----------------------------------------------------------------------------
# training on llm.c token shards


def read_shard(path, vocab_size):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        if len(header) != 256 or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
            sys.exit(f"error: {path}: not a token shard (bad magic or version)")
        tokens = np.frombuffer(f.read(), dtype=np.uint16)
    if tokens.size != header[2]:
        sys.exit(f"error: {path}: header says {header[2]} tokens, file holds {tokens.size}")
    if tokens.size and tokens.max() >= vocab_size:
        sys.exit(f"error: {path}: token id {tokens.max()} >= vocab size {vocab_size}")
    return tokens.astype(np.int64)


class ShardLoader:
    """Sequential batches over shards, B*T+1 tokens at a time, as the C loader reads them."""

    def __init__(self, pattern, B, T, vocab_size):
        self.files = sorted(glob.glob(pattern))
        if not self.files:
            sys.exit(f"error: no files match {pattern}")
        self.B, self.T, self.vocab_size = B, T, vocab_size
        self.reset()

    def reset(self):
        self.shard, self.pos = 0, 0
        self.tokens = read_shard(self.files[0], self.vocab_size)

    def next_batch(self):
        n = self.B * self.T
        if self.pos + n + 1 > len(self.tokens):
            self.shard = (self.shard + 1) % len(self.files)
            self.tokens, self.pos = read_shard(self.files[self.shard], self.vocab_size), 0
            if n + 1 > len(self.tokens):
                sys.exit(f"error: {self.files[self.shard]} is too short for B*T+1 = {n + 1} tokens")
        buf = torch.from_numpy(self.tokens[self.pos:self.pos + n + 1])
        self.pos += n
        return buf[:-1].view(self.B, self.T), buf[1:].view(self.B, self.T)


def lr_at(step, args):
    """Linear warmup then cosine decay from lr to lr * final_frac, as the C trainers do."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    if args.steps <= args.warmup:
        return args.lr
    ratio = (step - args.warmup) / (args.steps - args.warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return args.lr * (args.final_frac + (1.0 - args.final_frac) * coeff)


def train(args):
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but no CUDA device is available")
    torch.manual_seed(args.seed)
    shape = re.fullmatch(r"d(\d+)(?:c(\d+)(?:h(\d+))?)?", args.init)
    if shape and not os.path.exists(args.init):
        L, C, NH = (int(g) if g else 0 for g in shape.groups())
        if L < 1 or (C and NH and C % NH) or (C and not NH and C % max(1, C // 64)):
            sys.exit(f"error: -e {args.init}: not a shape that can be built")
        # the vocabulary of the tokenizer.bin beside the first training shard, as the C trainer's
        tok = os.path.join(os.path.dirname(sorted(glob.glob(args.input))[0]) if glob.glob(args.input) else "", "tokenizer.bin")
        V = int(np.fromfile(tok, dtype="<i4", count=3)[2]) if os.path.exists(tok) else 50257
        model = GPT(GPTConfig.from_depth(L, args.norm, vocab_size=V, block_size=max(1024, args.T), channels=C, heads=NH))
    else:
        model = read_model(args.init)
    model.to(device)
    cfg = model.config
    if args.T > cfg.block_size:
        sys.exit(f"error: -t {args.T} exceeds the model's maximum sequence length {cfg.block_size}")
    tokens_per_micro = args.B * args.T
    if args.total_batch % tokens_per_micro:
        sys.exit(f"error: total batch {args.total_batch} is not a multiple of B*T = {tokens_per_micro}")
    accum = args.total_batch // tokens_per_micro
    print(f"model: {cfg.norm_mode} L={cfg.n_layer} C={cfg.n_embd} NH={cfg.n_head} V={cfg.vocab_size} "
          f"| {sum(p.numel() for p in model.parameters()):,} params | grad accum {accum} | {device} {args.dtype}")
    fused = device == "cuda"
    opt = torch.optim.AdamW(model.optimizer_groups(args.wd), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    step_model = torch.compile(model) if args.compile else model
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")
    train_loader = ShardLoader(args.input, args.B, args.T, cfg.vocab_size)
    val_loader = ShardLoader(args.val, args.B, args.T, cfg.vocab_size) if args.val else None
    if args.output:
        os.makedirs(args.output, exist_ok=True)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for step in range(args.steps + 1):
        last = step == args.steps
        if val_loader and args.val_every > 0 and (step % args.val_every == 0 or last):
            model.eval()
            val_loader.reset()
            with torch.no_grad():
                total = 0.0
                for _ in range(args.val_batches):
                    xb, yb = val_loader.next_batch()
                    with autocast:
                        total += step_model(xb.to(device), yb.to(device))[1].item()
            print(f"val loss {total / args.val_batches:.6f}")
            model.train()
        if last:
            break
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        loss_acc = 0.0
        for _ in range(accum):
            xb, yb = train_loader.next_batch()
            with autocast:
                _, loss = step_model(xb.to(device), yb.to(device))
            (loss / accum).backward()
            loss_acc += loss.item() / accum
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip).item()
        lr = lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        sync()
        dt = time.time() - t0
        print(f"step {step + 1}/{args.steps} | loss {loss_acc:.6f} | norm {norm:.4f} | lr {lr:.2e} "
              f"| {dt * 1000:.2f} ms | {args.total_batch / dt:.0f} tok/s", flush=True)
    if device == "cuda":  # read by dev/bench_gpu.sh
        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB (torch.cuda.max_memory_allocated)")
    if args.output:
        model.to("cpu")
        write_model(model, os.path.join(args.output, f"model_{args.steps:08d}.bin"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write_dumps", metavar="DIR", help="write the reference dumps for test_gpt2 and exit")
    p.add_argument("--check_dumps", metavar="DIR", help="check dumps written by ./test_gpt2 --write DIR SHAPE against "
                   "this model in float64 and exit (status 1 if over test_gpt2's tolerances)")
    p.add_argument("-i", dest="input", help="train token shards (glob)")
    p.add_argument("-j", dest="val", default="", help="val token shards (glob)")
    p.add_argument("-e", dest="init", default="d12",
                   help="checkpoint path, or a fresh model: dN (depth N), dNcC or dNcChH (N layers of C channels, H heads)")
    p.add_argument("-N", dest="norm", default="siamese", choices=NORM_MODES, help="norm mode of a fresh model")
    p.add_argument("-o", dest="output", default="", help="output folder for the final checkpoint")
    p.add_argument("-b", dest="B", type=int, default=4, help="micro-batch size")
    p.add_argument("-t", dest="T", type=int, default=1024, help="sequence length")
    p.add_argument("-d", dest="total_batch", type=int, default=-1, help="total batch in tokens (default B*T)")
    p.add_argument("-l", dest="lr", type=float, default=3e-4, help="learning rate")
    p.add_argument("-u", dest="warmup", type=int, default=0, help="warmup steps")
    p.add_argument("-q", dest="final_frac", type=float, default=1.0, help="final lr as a fraction of -l")
    p.add_argument("-c", dest="wd", type=float, default=0.0, help="weight decay")
    p.add_argument("-x", dest="steps", type=int, default=10, help="number of steps")
    p.add_argument("-v", dest="val_every", type=int, default=20, help="val loss every N steps (0 = never)")
    p.add_argument("-m", dest="val_batches", type=int, default=20, help="val batches")
    p.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--compile", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0 = torch default)")
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.write_dumps:
        write_dumps(args.write_dumps)
        return
    if args.check_dumps:
        sys.exit(1 if check_dumps(args.check_dumps) else 0)
    if not args.input:
        p.error("-i (train shards) is required unless --write_dumps is given")
    if min(args.B, args.T, args.steps) <= 0:
        p.error("-b, -t and -x must be positive")
    if args.total_batch == -1:
        args.total_batch = args.B * args.T
    train(args)


if __name__ == "__main__":
    main()
