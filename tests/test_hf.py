"""
tests/test_hf.py: models exported by dev/export_hf.py, run in Hugging Face transformers, against the
CPU trainer's own numbers (make test-hf runs it through tests/test_hf.sh, which installs what it
needs but torch; not part of make test).

The models, every norm mode:
  stored  data/test/{pre,post,siamese,siamese_trained}/model.bin, the tiny models of the parity test
          (L 3, C 32, NH 2, V 200 padded to 256, maxT 64; every LayerNorm and bias perturbed,
          siamese_trained trained 200 steps)
  fresh   d2c64h2 in each mode, trained 3 steps by ./train_gpt2 on the arithmetic data (V 257
          padded to 384, maxT 1024; the export carries the byte-level tokenizer)
  gpt2    a d1c32h1 pre model of GPT-2's vocabulary (V 50257 padded to 50304) trained 2 steps on
          random tokens, and the same model as llm.c's bf16 checkpoint (an llm.c file exports too)

The reference is tests/bin/trainer_logits: train_gpt2.c's gpt2_forward on one row of tokens, and
greedy decoding from those logits. For each model:
  1. the class: GPT2LMHeadModel (pre) or SiameseGPT2ForCausalLM (post, siamese, remote code)
  2. logits of one row of maxT tokens (every position embedding): max |hf - trainer| over the row,
     divided by max |trainer|, at most 1e-4 (the value is printed, per model)
  3. generate(): 12 greedy tokens after an 8-token prompt, with and without the KV cache, are the
     trainer's greedy tokens (a step whose best two trainer logits are within 1e-4 of each other,
     relative to the largest, is a tie either may break: only the tokens before it must agree)
  4. the KV cache: the prompt, then 3 tokens, then one at a time, gives the logits of one full pass
  5. padding: a left-padded row with its attention mask gives the logits and the greedy tokens of
     the row alone, next to an unpadded one in the same batch
  6. labels: the loss is the mean next-token cross-entropy of the trainer's logits (float64 here)
  7. return_dict=False: a tuple (loss, logits, ...) with the same numbers
  8. remote code: a request it does not implement (output_hidden_states) and a position past maxT
     are refused with an error, not answered wrongly
Where lm-eval is installed (this test does not install it): its "hf" model on the fresh exports
gives the trainer's log-likelihoods of arithmetic answers and its greedy answers (generate_until).
Then dev/export_hf.py itself: the refusals (one "error: ..." line, exit status 1, nothing written:
missing, truncated, damaged checkpoints, a NaN weight, a non-empty or non-folder OUTDIR, a wrong
tokenizer), --force over an earlier export (its stale files go, other files stay), and the
tokenizers: the byte-level one encodes as the data pipeline does (dev/data/data_common.py), and
GPT-2's, made from gpt2.tiktoken (--tiktoken, $GPT2_TIKTOKEN or ../shared/data/gpt2.tiktoken beside
the repository; skipped with a message without one), encodes text as tiktoken does, and is the same
made from the data's tokenizer.bin. Closes with "test_hf: N passed, N failed".
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "dev", "data"))
import data_common as dc  # noqa: E402 (the data pipeline's encoders: the tokenizers' reference)

TOL = 1e-4        # exported model against the trainer, relative to the largest |logit|
TOL_SELF = 1e-5   # the exported model against itself along another path (cache, padding)
PROMPT, NEW = 8, 12

passed = failed = 0
measured = []  # (model, mode, relative logit difference)


def check(condition, what, detail=""):
    global passed, failed
    if condition:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""))
    return condition


def rel(a, ref):
    return float(np.abs(np.asarray(a, dtype=np.float64) - ref).max() / np.abs(ref).max())


def trainer(model_path, tokens, greedy=0):
    """The CPU trainer's logits (T, V) for one row and its `greedy` greedy tokens."""
    out = os.path.join(WORK, "trainer_logits.bin")
    r = subprocess.run([os.path.join(REPO, "tests", "bin", "trainer_logits"), model_path, out,
                        ",".join(str(int(t)) for t in tokens), str(greedy)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: tests/bin/trainer_logits {model_path}: {r.stderr.strip()}")
    data = np.fromfile(out, dtype=np.uint8)
    n_logits = (len(data) - 4 * greedy) // 4
    logits = data[:4 * n_logits].view("<f4").reshape(len(tokens), -1)
    return logits, [int(t) for t in data[4 * n_logits:].view("<i4")]


def export(checkpoint, outdir, *extra):
    return subprocess.run([sys.executable, os.path.join(REPO, "dev", "export_hf.py"), checkpoint, outdir] + list(extra),
                          capture_output=True, text=True)


def header_of(path):
    return np.fromfile(path, dtype="<i4", count=256)


# ----------------------------------------------------------------------------
# one exported model against the trainer

def greedy_agrees(name, hf_tokens, ref_tokens, ref_logits, prompt_len=PROMPT):
    """Check 3: hf_tokens are ref_tokens, or agree with them up to a near-tie of the trainer's logits
    (ref_logits: the trainer's logits of the prompt of prompt_len tokens and its greedy tokens)."""
    scale = np.abs(ref_logits).max()
    k = next((k for k, (a, b) in enumerate(zip(hf_tokens, ref_tokens)) if a != b), None)
    if k is None:
        return check(len(hf_tokens) == len(ref_tokens), name, f"{hf_tokens} against {ref_tokens}")
    top = np.sort(ref_logits[prompt_len - 1 + k])[-2:]
    margin = (top[1] - top[0]) / scale
    tie = margin < TOL
    return check(tie, name + (f" up to step {k}, a near-tie (margin {margin:.1e})" if tie else ""),
                 f"step {k}: {hf_tokens[k]} against the trainer's {ref_tokens[k]}, not a near-tie (margin "
                 f"{margin:.2e}); tokens {hf_tokens} against {ref_tokens}")


def model_checks(label, checkpoint, outdir, prompt=None, tokenizer_args=()):
    r = export(checkpoint, outdir, *tokenizer_args)
    if not check(r.returncode == 0, f"{label}: export", r.stderr.strip()):
        return None
    h = header_of(checkpoint)
    V, maxT = int(h[3]), int(h[2])
    mode = "pre" if h[0] == 20240326 else ["pre", "post", "siamese"][h[8]]
    model = AutoModelForCausalLM.from_pretrained(outdir, trust_remote_code=True).eval()
    expected_class = "GPT2LMHeadModel" if mode == "pre" else "SiameseGPT2ForCausalLM"
    check(type(model).__name__ == expected_class, f"{label}: loads as {expected_class}", type(model).__name__)

    row = np.random.RandomState(int(h[6]) * 7 + int(h[8])).randint(0, V, size=maxT)
    if prompt is not None:
        row[:PROMPT] = prompt
    ref, _ = trainer(checkpoint, row)
    with torch.no_grad():
        logits = model(torch.tensor(row[None])).logits[0].numpy()
    err = rel(logits, ref)
    measured.append((label, mode, err))
    check(logits.shape == (maxT, V) and err <= TOL, f"{label}: logits of {maxT} positions within {TOL:g} of the trainer's "
          f"(max |diff| / max |logit| = {err:.2e})", f"shape {logits.shape}")

    ids = torch.tensor(row[None, :PROMPT])
    _, ref_tokens = trainer(checkpoint, row[:PROMPT], NEW)
    full_ref, _ = trainer(checkpoint, list(row[:PROMPT]) + ref_tokens)  # the logits each greedy step saw
    for use_cache in (True, False):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
                                 use_cache=use_cache, pad_token_id=0)
        greedy_agrees(f"{label}: generate() (use_cache={use_cache}) gives the trainer's {NEW} greedy tokens",
                      out[0, PROMPT:].tolist(), ref_tokens, full_ref)

    n = min(20, maxT)
    with torch.no_grad():
        full = model(torch.tensor(row[None, :n]), use_cache=False).logits[0].numpy()
        first = model(torch.tensor(row[None, :10]), use_cache=True)
        cache_name = "cache" if "cache" in first else "past_key_values"  # newer transformers: cache
        pieces = [first.logits[0].numpy()]
        for a, b in [(10, 13)] + [(t, t + 1) for t in range(13, n)]:
            step = model(torch.tensor(row[None, a:b]), attention_mask=torch.ones(1, b, dtype=torch.long),
                         use_cache=True, **{cache_name: first[cache_name]})
            pieces.append(step.logits[0].numpy())
    check(rel(np.concatenate(pieces), full) <= TOL_SELF, f"{label}: the KV cache, 10 + 3 + 1 + 1 ... tokens, "
          f"gives the full pass's logits", f"{rel(np.concatenate(pieces), full):.2e}")

    pad = 7
    batch = torch.zeros(2, n, dtype=torch.long)
    mask = torch.ones(2, n, dtype=torch.long)
    batch[0] = torch.tensor(row[:n])
    batch[1, pad:] = torch.tensor(row[:n - pad])
    mask[1, :pad] = 0
    # transformers' GPT-2 counts positions from the first column whatever the mask says, so a
    # left-padded batch needs position_ids (generate() makes them); the remote code counts each
    # row's real tokens itself
    positions = dict(position_ids=(mask.cumsum(-1) - 1).clamp(min=0)) if mode == "pre" else {}
    with torch.no_grad():
        both = model(batch, attention_mask=mask, **positions).logits.numpy()
        short = model(torch.tensor(row[None, :n - pad])).logits[0].numpy()
        gen = model.generate(batch, attention_mask=mask, max_new_tokens=4,
                             do_sample=False, pad_token_id=0)
        alone = model.generate(torch.tensor(row[None, :n - pad]), max_new_tokens=4, do_sample=False, pad_token_id=0)
    check(rel(both[0], full) <= TOL_SELF and rel(both[1, pad:], short) <= TOL_SELF,
          f"{label}: a left-padded row (attention_mask) gets the logits of the row alone",
          f"{rel(both[0], full):.2e}, {rel(both[1, pad:], short):.2e}")
    check(gen[1, n:].tolist() == alone[0, n - pad:].tolist(), f"{label}: generate() on the padded batch gives the "
          "row's own greedy tokens", f"{gen[1, n:].tolist()} against {alone[0, n - pad:].tolist()}")

    with torch.no_grad():
        out = model(torch.tensor(row[None]), labels=torch.tensor(row[None]))
        tup = model(torch.tensor(row[None]), labels=torch.tensor(row[None]), return_dict=False)
    lg = ref[:-1].astype(np.float64)
    lse = lg.max(-1) + np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1))
    ref_loss = float(np.mean(lse - lg[np.arange(maxT - 1), row[1:]]))
    check(abs(out.loss.item() - ref_loss) <= TOL_SELF * max(1.0, ref_loss), f"{label}: labels give the loss of the "
          f"trainer's logits ({out.loss.item():.6f} against {ref_loss:.6f})")
    check(isinstance(tup, tuple) and tup[0].item() == out.loss.item() and torch.equal(tup[1], out.logits),
          f"{label}: return_dict=False gives (loss, logits, ...)")

    if mode != "pre":
        for what, kwargs, error in [("output_hidden_states=True", dict(output_hidden_states=True), NotImplementedError),
                                    (f"{maxT + 1} positions", dict(), ValueError)]:
            ids_bad = torch.tensor(np.resize(row, maxT + 1)[None]) if not kwargs else torch.tensor(row[None, :4])
            try:
                with torch.no_grad():
                    model(ids_bad, **kwargs)
                check(False, f"{label}: {what} is refused", "it ran")
            except error as e:
                check(True, f"{label}: {what} is refused ({type(e).__name__}: {str(e)[:70]}...)")
    return model


# ----------------------------------------------------------------------------
# lm-eval, when it is installed

PROBLEMS = [("\n17+72=", "98\n"), ("\n97+08=", "501\n"), ("\n32+15=", "74\n"), ("\n5+9=", "41\n"),
            ("\n60+40=", "001\n"), ("\n1+1=", "2\n")]


def lm_eval_checks(label, checkpoint, outdir):
    """lm-eval's "hf" model (HFLM, as `lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True`
    builds it) on an export with the byte-level tokenizer: its log-likelihoods of the answers are the
    trainer's (float64 sums of the trainer's log-softmax, within 1e-4), and generate_until answers
    with the trainer's greedy tokens."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    lm = HFLM(pretrained=outdir, trust_remote_code=True, device="cpu", batch_size=4)
    requests = [Instance("loglikelihood", {}, (ctx, cont), i) for i, (ctx, cont) in enumerate(PROBLEMS)]
    got = [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]
    worst = 0.0
    for (ctx, cont), ll in zip(PROBLEMS, got):
        toks = [int(t) for t in dc.encode_bytes((ctx + cont).encode())]
        lg, _ = trainer(checkpoint, toks[:-1])
        lg = lg.astype(np.float64)
        m = lg.max(-1, keepdims=True)
        logp = lg - m - np.log(np.exp(lg - m).sum(-1, keepdims=True))
        ref = sum(logp[i - 1, toks[i]] for i in range(len(ctx.encode()), len(toks)))
        worst = max(worst, abs(ll - ref))
    check(worst <= TOL, f"{label}: lm-eval's log-likelihoods of {len(PROBLEMS)} answers are the trainer's "
          f"(largest difference {worst:.1e})")
    until = {"until": ["\n"], "max_gen_toks": 6, "do_sample": False}
    answers = lm.generate_until([Instance("generate_until", {}, (ctx, until), i) for i, (ctx, _) in enumerate(PROBLEMS)],
                                disable_tqdm=True)
    for (ctx, _), answer in zip(PROBLEMS, answers):
        prompt = [int(t) for t in dc.encode_bytes(ctx.encode())]
        _, ref_tokens = trainer(checkpoint, prompt, 6)
        ref_tokens = ref_tokens[:ref_tokens.index(198)] if 198 in ref_tokens else ref_tokens  # up to the newline
        ref_logits, _ = trainer(checkpoint, prompt + ref_tokens)
        greedy_agrees(f"{label}: lm-eval generate_until answers {ctx.strip()} as the trainer ({answer!r})",
                      [int(t) for t in dc.encode_bytes(answer.encode())], ref_tokens, ref_logits, len(prompt))


# ----------------------------------------------------------------------------
# the exporter's refusals and --force

def refused(what, args, needle, outdir):
    existed = os.path.exists(outdir)
    before = sorted(os.listdir(outdir)) if os.path.isdir(outdir) else None
    r = export(*args)
    lines = r.stderr.strip().splitlines()
    ok = r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0] and not r.stdout
    unchanged = os.path.exists(outdir) == existed and (before is None or sorted(os.listdir(outdir)) == before)
    check(ok and unchanged, f"refused: {what} ({lines[0] if lines else 'no message'})",
          f"exit {r.returncode}, stderr {r.stderr!r}, stdout {r.stdout!r}, OUTDIR {'unchanged' if unchanged else 'changed'}")


def refusal_checks(tmp):
    good = os.path.join(REPO, "data", "test", "post", "model.bin")
    data = open(good, "rb").read()
    out = os.path.join(tmp, "refused")

    def damaged(name, content):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def with_header(**entries):
        h = np.frombuffer(data[:1024], dtype="<i4").copy()
        for i, v in entries.items():
            h[int(i[1:])] = v
        return h.tobytes() + data[1024:]

    nan = bytearray(data)
    at = 1024 + 4 * (256 * 32 + 5)  # element 5 of wpe, after wte (Vp 256, C 32)
    nan[at:at + 4] = np.array([np.nan], dtype="<f4").tobytes()
    cases = [
        ("a missing checkpoint", os.path.join(tmp, "nope.bin"), "no such file"),
        ("a file shorter than the header", damaged("short.bin", data[:1000]), "truncated"),
        ("a truncated checkpoint", damaged("cut.bin", data[:-4]), "truncated or corrupted"),
        ("bytes after the parameters", damaged("long.bin", data + b"\0\0\0\0"), "truncated or corrupted"),
        ("a wrong magic number", damaged("magic.bin", with_header(h0=12345)), "bad magic"),
        ("a wrong version", damaged("version.bin", with_header(h1=2)), "version 2"),
        ("an unknown norm mode", damaged("mode.bin", with_header(h8=3)), "norm mode 3"),
        ("heads that do not split C", damaged("heads.bin", with_header(h5=3)), "inconsistent model sizes"),
        ("an llm.c file of version 4", damaged("llmc4.bin", with_header(h0=20240326, h1=4)), "version 4"),
        ("a NaN weight", damaged("nan.bin", bytes(nan)), "wpe holds NaN"),
    ]
    for what, path, needle in cases:
        refused(what, (path, out), needle, out)
    os.makedirs(out)
    open(os.path.join(out, "notes.txt"), "w").write("mine\n")
    refused("a non-empty OUTDIR without --force", (good, out), "not empty", out)
    refused("an OUTDIR that is a file", (good, os.path.join(out, "notes.txt")), "not a folder", out)
    fresh = os.path.join(tmp, "refused_new")
    refused("a tokenizer of another size", (good, fresh, "--tokenizer", os.path.join(REPO, "data", "arithmetic",
                                                                                      "tokenizer.bin")), "257 tokens", fresh)
    refused("a tokenizer file that is neither format", (good, fresh, "--tokenizer", good), "neither a tokenizer.bin", fresh)

    # --force: a pre export over a post export removes the post export's model code, keeps notes.txt
    r1 = export(good, out, "--force")
    had_code = os.path.exists(os.path.join(out, "modeling_siamese_gpt2.py"))
    r2 = export(os.path.join(REPO, "data", "test", "pre", "model.bin"), out, "--force")
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(r1.returncode == 0 and r2.returncode == 0 and had_code and cfg["model_type"] == "gpt2" and
          sorted(os.listdir(out)) == ["config.json", "model.safetensors", "notes.txt"],
          "--force: a pre export over a post export leaves no model code behind, and the folder's own files",
          f"{r1.stderr}{r2.stderr} {sorted(os.listdir(out))}")


# ----------------------------------------------------------------------------
# tokenizers

SAMPLE = ("Hello world, it's   a test\n\n  ok? I'll say: \"don't\"\t123 4567 -- naïve café, Ünïcödé ✓ 日本語 😀\n"
          "    indented\r\nend.  ")


def tokenizer_checks(tmp, fresh_dir, tiktoken_path, gpt2_checkpoint):
    tok = AutoTokenizer.from_pretrained(fresh_dir, trust_remote_code=True)  # config.json names remote code
    text = "\n12+05=710\n" + SAMPLE
    ids = tok(text).input_ids
    check(tok("\n12+05=710\n").input_ids == [198, 16, 17, 10, 15, 20, 28, 22, 16, 15, 198] and
          ids == [int(t) for t in dc.encode_bytes(text.encode())] and tok.decode(ids) == text,
          "byte-level tokenizer (V 257): the data pipeline's tokens ('0' 15, '+' 10, '=' 28, newline 198), decoded back")
    again = os.path.join(tmp, "fresh_tokenizer_bin")
    r = export(os.path.join(WORK, "fresh_siamese", "model_00000003.bin"), again, "--tokenizer",
               os.path.join(REPO, "data", "arithmetic", "tokenizer.bin"))
    same = r.returncode == 0 and open(os.path.join(again, "tokenizer.json")).read() == \
        open(os.path.join(fresh_dir, "tokenizer.json")).read()
    check(same, "byte-level tokenizer: --tokenizer data/arithmetic/tokenizer.bin writes the same tokenizer.json", r.stderr)

    if tiktoken_path is None:
        print("skip GPT-2 tokenizer: no gpt2.tiktoken (--tiktoken PATH, $GPT2_TIKTOKEN or ../shared/data/gpt2.tiktoken)")
        return
    enc = dc.gpt2_encoding(tiktoken_path)
    out = os.path.join(tmp, "gpt2_tokenizer")
    r = export(gpt2_checkpoint, out, "--tokenizer", tiktoken_path)
    if not check(r.returncode == 0, "GPT-2 tokenizer: export with --tokenizer gpt2.tiktoken", r.stderr):
        return
    tok = AutoTokenizer.from_pretrained(out)
    shakespeare = os.path.join(os.path.dirname(tiktoken_path), "tinyshakespeare.txt")  # ../shared/data holds both
    text = SAMPLE + (open(shakespeare, encoding="utf-8").read()[:200000] if os.path.exists(shakespeare) else "")
    ids = tok(text).input_ids
    ref = enc.encode_ordinary(text)
    first = next((i for i, (a, b) in enumerate(zip(ids, ref)) if a != b), None)
    check(ids == ref and tok.decode(ids) == text, f"GPT-2 tokenizer: {len(ref)} tokens of text as tiktoken encodes "
          "them, decoded back", f"first difference at token {first}: {ids[first:first + 5] if first is not None else ids[-5:]} "
          f"against {ref[first:first + 5] if first is not None else ref[-5:]}")
    check(tok.eos_token_id == 50256 and tok("<|endoftext|>").input_ids == [50256],
          "GPT-2 tokenizer: <|endoftext|> is the special token 50256")
    bin_path = os.path.join(tmp, "tokenizer.bin")
    dc.write_tokenizer(bin_path, enc)
    out2 = os.path.join(tmp, "gpt2_tokenizer_bin")
    r = export(gpt2_checkpoint, out2, "--tokenizer", bin_path)
    check(r.returncode == 0 and open(os.path.join(out2, "tokenizer.json")).read() ==
          open(os.path.join(out, "tokenizer.json")).read(),
          "GPT-2 tokenizer: the data folder's tokenizer.bin gives the same tokenizer.json as gpt2.tiktoken", r.stderr)


# ----------------------------------------------------------------------------

def train(mode, outdir, extra):
    r = subprocess.run([os.path.join(REPO, "train_gpt2"), "-N", mode, "-u", "1", "-v", "0", "-s", "0", "-k", "0",
                        "-o", outdir] + extra, capture_output=True, text=True, cwd=REPO)
    if r.returncode != 0:
        sys.exit(f"error: ./train_gpt2 {' '.join(extra)}: {r.stderr.strip() or r.stdout[-500:]}")


def write_llmc_bf16(src, dst):
    """Our pre-mode checkpoint as llm.c's bf16 file (version 5): the upper half of every float32,
    rounded to nearest even."""
    h = header_of(src).copy()
    h[0], h[1], h[8] = 20240326, 5, 0
    bits = np.fromfile(src, dtype="<u4", offset=1024).astype(np.uint64)
    bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    with open(dst, "wb") as f:
        f.write(h.tobytes() + bf16.tobytes())


def main():
    global WORK, torch, AutoModelForCausalLM, AutoTokenizer
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--tiktoken", help="gpt2.tiktoken for the GPT-2 tokenizer checks")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its path is printed)")
    args = parser.parse_args()
    WORK = tempfile.mkdtemp(prefix="test_hf_")
    # nothing from the network; the exports' model code is cached inside the work folder
    os.environ.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=os.path.join(WORK, "modules"), TRANSFORMERS_VERBOSITY="error")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    print(f"test_hf: torch {torch.__version__}, transformers {transformers.__version__}, work folder {WORK}")
    try:
        for name in ("pre", "post", "siamese", "siamese_trained"):
            model_checks(f"stored {name}", os.path.join(REPO, "data", "test", name, "model.bin"),
                         os.path.join(WORK, f"stored_{name}"))
        for mode in ("pre", "post", "siamese"):
            train(mode, os.path.join(WORK, f"fresh_{mode}"), ["-e", "d2c64h2", "-x", "3", "-l", "1e-2", "-b", "4", "-t", "32"])
            prompt = [int(t) for t in dc.encode_bytes(b"\n3+4=70\n12")]  # tokens of the arithmetic data
            model_checks(f"fresh {mode}", os.path.join(WORK, f"fresh_{mode}", "model_00000003.bin"),
                         os.path.join(WORK, f"fresh_{mode}_hf"), prompt[:PROMPT])

        shard_dir = os.path.join(WORK, "gpt2_data")
        os.makedirs(shard_dir)
        shard = os.path.join(shard_dir, "train.bin")
        subprocess.run([os.path.join(REPO, "tests", "bin", "mkshard"), shard, "4096", "50257"], check=True)
        train("pre", os.path.join(WORK, "gpt2"), ["-e", "d1c32h1", "-i", shard, "-j", "", "-x", "2", "-l", "1e-2",
                                                  "-b", "2", "-t", "32"])
        gpt2_checkpoint = os.path.join(WORK, "gpt2", "model_00000002.bin")
        tiktoken_path = args.tiktoken or os.environ.get("GPT2_TIKTOKEN") or \
            os.path.join(REPO, "..", "shared", "data", "gpt2.tiktoken")
        tiktoken_path = tiktoken_path if os.path.isfile(tiktoken_path) else None
        hello = dc.gpt2_encoding(tiktoken_path).encode_ordinary("Hello, my name is Juliet and I live in Verona.")[:PROMPT] \
            if tiktoken_path else None
        model_checks("gpt2 pre", gpt2_checkpoint, os.path.join(WORK, "gpt2_hf"), hello)
        llmc = os.path.join(WORK, "gpt2_llmc_bf16.bin")
        write_llmc_bf16(gpt2_checkpoint, llmc)
        model_checks("gpt2 llm.c bf16", llmc, os.path.join(WORK, "gpt2_llmc_hf"))

        try:
            import lm_eval  # noqa: F401 (not installed for this test: pip install "lm-eval[hf]")
            for mode in ("pre", "post", "siamese"):
                lm_eval_checks(f"fresh {mode}", os.path.join(WORK, f"fresh_{mode}", "model_00000003.bin"),
                               os.path.join(WORK, f"fresh_{mode}_hf"))
        except ImportError:
            print('skip lm-eval: not installed (pip install "lm-eval[hf]" adds its checks)')
        refusal_checks(WORK)
        tokenizer_checks(WORK, os.path.join(WORK, "fresh_siamese_hf"), tiktoken_path, gpt2_checkpoint)
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)
    print("\nmax |hf - trainer| / max |trainer logit|, float32, per exported model:")
    for label, mode, err in measured:
        print(f"  {label:<20} {mode:<8} {err:.2e}")
    print(f"test_hf: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
