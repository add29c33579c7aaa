"""
dev/data/test_roundtrip.py: the C decoder (common/tokenizer.h) against tiktoken on real text.

    python dev/data/test_roundtrip.py [--input FILE] [--bytes N] [--tiktoken PATH]

Encodes the first --bytes bytes of --input (default: ../shared/data/tinyshakespeare.txt beside the
repository) plus a few lines of non-English text with GPT-2's tokenizer, writes tokenizer.bin and
the ids into a temporary folder, decodes them with tests/bin/decode_tokens (streamed, and with
--buffer all at once) and checks that the bytes equal the original text. Then decodes random
token sequences, full of characters cut between tokens, and compares with Python's
bytes.decode("utf-8", errors="replace"). Skips, saying why, without tiktoken or gpt2.tiktoken.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import data_common as dc  # noqa: E402

DECODER = os.path.join(REPO, "tests", "bin", "decode_tokens")

# multi-byte characters of 2, 3 and 4 bytes; GPT-2 cuts many of them between tokens
EXTRA_TEXT = (
    "\n\nNa\u00efve caf\u00e9 cr\u00e8me br\u00fbl\u00e9e, \u00c5ngstr\u00f6m, \u00e6sir \u00fe\u00f0.\n"
    "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440! "
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5.\n"
    "\u6771\u4eac\u3068\u5927\u962a \u2014 \u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002 "
    "\ud55c\uad6d\uc5b4 \ud14c\uc2a4\ud2b8.\n"
    "\u2211 x\u00b2 \u2264 \u221e, \u20ac5 \u2192 \u00a35; "
    "\U0001F600\U0001F680\U0001F9EA \U00010348 \U0001D11E\n"
)


def run_decoder(tokenizer_path, ids, buffer_mode):
    args = [DECODER] + (["--buffer"] if buffer_mode else []) + [tokenizer_path]
    r = subprocess.run(args, input=" ".join(str(i) for i in ids).encode(), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def ensure_decoder():
    """(Re)build tests/bin/decode_tokens; make does nothing if it is newer than its sources."""
    try:
        r = subprocess.run(["make", "-s", "-f", "tests/tests.mk", "decode_tokens"], cwd=REPO,
                           capture_output=True, text=True)
    except FileNotFoundError:
        r = None
    if not os.access(DECODER, os.X_OK) or (r is not None and r.returncode != 0):
        why = r.stderr.strip() if r is not None else "make is not installed"
        print(f"error: cannot build {DECODER}: {why} (try: make -f tests/tests.mk decode_tokens)")
        return False
    if r is None:
        print(f"note: make is not installed; using the existing {DECODER} as it is")
    return True


def main():
    parser = argparse.ArgumentParser(description="the C decoder against tiktoken")
    parser.add_argument("--input", default=os.path.join(REPO, "..", "shared", "data", "tinyshakespeare.txt"))
    parser.add_argument("--bytes", type=int, default=20000, help="how much of --input to use")
    parser.add_argument("--tiktoken", default=None, metavar="PATH")
    args = parser.parse_args()

    try:
        import tiktoken  # noqa: F401
    except ImportError:
        print("test_roundtrip: skipped: the tiktoken package is not installed")
        return 0
    tiktoken_path = args.tiktoken or os.environ.get("GPT2_TIKTOKEN") or \
        os.path.join(REPO, "..", "shared", "data", "gpt2.tiktoken")
    if not os.path.isfile(tiktoken_path):
        tiktoken_path = dc.find_gpt2_tiktoken(None)  # openai-whisper's copy, if installed
    if tiktoken_path is None:
        print("test_roundtrip: skipped: no gpt2.tiktoken (pass --tiktoken PATH or set GPT2_TIKTOKEN)")
        return 0
    if not os.path.isfile(args.input):
        print(f"test_roundtrip: skipped: no input text at {args.input} (pass --input FILE)")
        return 0
    if not ensure_decoder():
        return 1

    enc = dc.gpt2_encoding(tiktoken_path)
    with open(args.input, "rb") as f:
        raw = f.read(args.bytes)
    text = raw.decode("utf-8", errors="ignore") + EXTRA_TEXT  # "ignore" only drops a character cut at the end
    failures = 0

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_path = os.path.join(tmp, "tokenizer.bin")
        dc.write_tokenizer(tokenizer_path, enc)

        # 1. plain text
        ids = enc.encode_ordinary(text)
        split = sum(1 for i in ids if not _is_utf8(enc.decode_single_token_bytes(i)))
        before = failures
        for buffer_mode in (False, True):
            got = run_decoder(tokenizer_path, ids, buffer_mode)
            if got != text.encode("utf-8"):
                failures += 1
                print(f"FAIL: decoding {len(ids)} tokens ({'buffer' if buffer_mode else 'streamed'}) "
                      f"differs from the text at byte {_first_difference(got, text.encode('utf-8'))}")
        if failures == before:
            print(f"text: {len(text.encode('utf-8')):,} bytes, {len(ids):,} tokens, {split} of them not "
                  f"valid UTF-8 on their own: decoded back byte for byte")

        # 2. documents, each after <|endoftext|>, as in the shards
        docs = dc.split_documents(text, "blank")
        ids = np.concatenate([dc.encode_document(enc, d) for d in docs]).tolist()
        expected = "".join("<|endoftext|>" + d for d in docs).encode("utf-8")
        if run_decoder(tokenizer_path, ids, False) != expected:
            failures += 1
            print("FAIL: documents with <|endoftext|> do not decode back")
        else:
            print(f"documents: {len(docs)} documents, each after <|endoftext|>: decoded back")

        # 3. random token sequences, half of them from the tokens that are not valid UTF-8 alone,
        #    compared with Python's replacement decoding; plus ids outside the vocabulary
        before = failures
        rng = np.random.default_rng(1234)
        broken = np.array([i for i in range(enc.n_vocab - 1) if not _is_utf8(enc.decode_single_token_bytes(i))])
        for trial in range(20):
            n = int(rng.integers(1, 400))
            ids = np.where(rng.random(n) < 0.5, rng.choice(broken, n), rng.integers(0, enc.n_vocab, n)).tolist()
            expected = enc.decode_bytes(ids).decode("utf-8", errors="replace").encode("utf-8")
            for buffer_mode in (False, True):
                if run_decoder(tokenizer_path, ids, buffer_mode) != expected:
                    failures += 1
                    print(f"FAIL: random sequence {trial} ({'buffer' if buffer_mode else 'streamed'})")
        left, right = [int(i) for i in rng.choice(broken, 5)], [int(i) for i in rng.choice(broken, 5)]
        expected = (enc.decode_bytes(left).decode("utf-8", errors="replace") + "<|50300|>" +
                    enc.decode_bytes(right).decode("utf-8", errors="replace")).encode("utf-8")
        if run_decoder(tokenizer_path, left + [50300] + right, False) != expected:
            failures += 1
            print("FAIL: an id outside the vocabulary")
        if failures == before:
            print(f"random: 20 sequences drawing on the {len(broken)} tokens that are not valid UTF-8 "
                  f"alone, and an id outside the vocabulary: same as Python's errors='replace'")

        # 4. no tokenizer file: ids, and a one-line notice
        r = subprocess.run([DECODER, os.path.join(tmp, "missing.bin")], input=b"1 2 3", capture_output=True)
        if r.returncode != 0 or r.stdout != b"1 2 3" or not r.stderr.startswith(b"note: no tokenizer at"):
            failures += 1
            print(f"FAIL: without a tokenizer: {r.stdout!r} {r.stderr!r}")

    if failures:
        print(f"test_roundtrip: {failures} check(s) FAILED")
        return 1
    print("test_roundtrip: all checks passed")
    return 0


def _is_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _first_difference(a, b):
    for k in range(min(len(a), len(b))):
        if a[k] != b[k]:
            return k
    return min(len(a), len(b))


if __name__ == "__main__":
    sys.exit(main())
