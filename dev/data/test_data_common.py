"""
dev/data/test_data_common.py: offline tests of the data-preparation code.

    python dev/data/test_data_common.py [--tiktoken PATH]

Checks the shard and tokenizer writers byte by byte, the document splitter, the ShardWriter (shard
sizes, names, the short-tail merge), hellaswag.py on a made-up JSON-lines file (its eval file read
back per the format), prepare.py --bytes (byte-level shards and their tokenizer,
which must equal the one common/arithmetic.h writes), and runs tinystories.py and fineweb.py end to end on small
made-up inputs (a tar.gz of JSON stories, a JSON-lines file) so that everything but the download
is exercised. Tests that need GPT-2's vocabulary use --tiktoken, $GPT2_TIKTOKEN or
../shared/data/gpt2.tiktoken beside the repository, and are skipped (with a message) without one.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import data_common as dc  # noqa: E402

failures = 0


def check(condition, what):
    global failures
    if not condition:
        failures += 1
        print(f"FAIL: {what}")


def run_script(args, cwd):
    return subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True)


# ----------------------------------------------------------------------------

def test_datafile(tmp):
    path = os.path.join(tmp, "a.bin")
    tokens = [0, 1, 50256, 65535, 7]
    dc.write_datafile(path, tokens)
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    check(list(header[:3]) == [20240520, 1, 5] and not header[3:].any(), "shard header")
    check(data[1024:] == np.array(tokens, dtype="<u2").tobytes(), "shard body is little-endian uint16")
    check(list(dc.read_datafile(path)) == tokens, "shard read back")
    check(not os.path.exists(path + ".tmp"), "no temporary file left behind")
    for bad in ([65536], [-1]):
        try:
            dc.write_datafile(path, bad)
            check(False, f"write_datafile accepted {bad}")
        except ValueError:
            pass
    check(list(dc.read_datafile(path)) == tokens, "a refused write leaves the old shard intact")
    dc.write_datafile(path, [])
    check(len(dc.read_datafile(path)) == 0, "empty shard")


class FakeEncoding:
    """Just what write_tokenizer uses of a tiktoken.Encoding."""
    n_vocab = 4
    eot_token = 3
    table = [b"a", b"\xe2\x82", b"", b"<|endoftext|>"]

    def decode_single_token_bytes(self, i):
        return self.table[i]


def test_tokenizer_file(tmp):
    path = os.path.join(tmp, "tokenizer.bin")
    dc.write_tokenizer(path, FakeEncoding())
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    check(list(header[:4]) == [20240328, 2, 4, 3] and not header[4:].any(), "tokenizer header")
    check(data[1024:] == b"\x01a" + b"\x02\xe2\x82" + b"\x00" + b"\x0d<|endoftext|>", "tokenizer body")

    class TooLong(FakeEncoding):
        table = [b"x" * 256, b"", b"", b""]
    try:
        dc.write_tokenizer(path, TooLong())
        check(False, "write_tokenizer accepted a 256-byte token")
    except ValueError:
        pass


def test_split_documents():
    cases = {
        "": [],
        "one": ["one"],
        "a\nb\n\nc": ["a\nb\n\n", "c"],
        "a\n\n\n\nb\n\n": ["a\n\n\n\n", "b\n\n"],
        "a\r\n\r\nb": ["a\r\n\r\n", "b"],
        "a\n  \nb\nc": ["a\n  \n", "b\nc"],
        "\n\nx": ["\n\n", "x"],
    }
    for text, expected in cases.items():
        got = dc.split_documents(text, "blank")
        check(got == expected, f"split_documents({text!r}) = {got}, expected {expected}")
    check(dc.split_documents("1+1=2\n2+2=4\n", "line") == ["1+1=2\n", "2+2=4\n"], "split by line")
    check(dc.split_documents("x\ny", "line") == ["x\n", "y"], "split by line, no final newline")
    check(dc.split_documents("x\n\ny", "none") == ["x\n\ny"], "no split")


def shards_in(folder, name):
    """The shard files of a folder: validation first, then training in name order."""
    names = [p for p in os.listdir(folder) if p.startswith(name + "_") and p.endswith(".bin")]
    return sorted(names, key=lambda p: ("_train" in p, p))


def test_shard_writer(tmp):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50257, size=int(rng.integers(1, 40)), dtype=np.int64) for _ in range(100)]
    stream = np.concatenate(docs)

    # numbered shards: val of 50, train shards of 300, tail merged or not
    for shard_tokens in (300, 137):
        folder = os.path.join(tmp, f"numbered{shard_tokens}")
        w = dc.ShardWriter(folder, "x", shard_tokens=shard_tokens, val_tokens=50, verbose=False)
        for d in docs:
            w.add(d)
        written = w.close()
        names = shards_in(folder, "x")
        check(names[0] == "x_val_000000.bin" and names[1] == "x_train_000001.bin", f"shard names {names[:2]}")
        check([os.path.basename(p) for p, n in written] == names, "written list matches the files")
        sizes = [len(dc.read_datafile(os.path.join(folder, n))) for n in names]
        check(sizes[0] == 50, "validation shard size")
        check(all(s == shard_tokens for s in sizes[1:-1]), f"full training shards {sizes}")
        check(shard_tokens // 2 <= sizes[-1] < shard_tokens * 3 // 2 + 1, f"last shard size {sizes[-1]}")
        everything = np.concatenate([dc.read_datafile(os.path.join(folder, n)) for n in names])
        check(np.array_equal(everything, stream), "shards concatenate to the token stream")
        check(w.num_val_tokens() + w.num_train_tokens() == len(stream), "token counts")

    # single validation and training file
    folder = os.path.join(tmp, "single")
    w = dc.ShardWriter(folder, "s", shard_tokens=None, val_tokens=64, numbered=False, verbose=False)
    w.add(stream)
    w.close()
    check(shards_in(folder, "s") == ["s_val.bin", "s_train.bin"], "un-numbered names")
    check(np.array_equal(dc.read_datafile(os.path.join(folder, "s_val.bin")), stream[:64]), "val file")
    check(np.array_equal(dc.read_datafile(os.path.join(folder, "s_train.bin")), stream[64:]), "train file")

    # stopping early drops the unfinished shard
    folder = os.path.join(tmp, "early")
    w = dc.ShardWriter(folder, "e", shard_tokens=100, verbose=False)
    w.add(stream[:250])
    w.close(write_tail=False)
    check(shards_in(folder, "e") == ["e_val_000000.bin", "e_train_000001.bin"], "write_tail=False")


def test_gpt2(tmp, tiktoken_path):
    enc = dc.gpt2_encoding(tiktoken_path)
    check(enc.n_vocab == 50257 and enc.eot_token == 50256, "GPT-2 vocabulary size and end-of-text id")
    # ids that GPT-2 is known to give (e.g. "Hello world" -> 15496, 995)
    check(enc.encode_ordinary("Hello world") == [15496, 995], "GPT-2 encodes 'Hello world' as 15496 995")
    check(enc.encode_ordinary("<|endoftext|>") != [50256], "special-token text in a document is plain text")
    text = "It's 2024:  caf\u00e9s \u2014 \u4f60\u597d! \U0001F600\n\n  tabs\tand   spaces "
    check(enc.decode(enc.encode_ordinary(text)) == text, "encode/decode round trip")
    doc = dc.encode_document(enc, "Hi")
    check(doc.dtype == np.uint16 and list(doc) == [50256] + enc.encode_ordinary("Hi"), "encode_document")

    texts = [f"document {i}: " + "words " * (i % 7) for i in range(200)]
    serial = list(dc.tokenize_documents(texts, tiktoken_path, workers=1))
    parallel = list(dc.tokenize_documents(texts, tiktoken_path, workers=2, chunksize=8))
    check(len(serial) == 200 and all(np.array_equal(a, b) for a, b in zip(serial, parallel)),
          "tokenizing on 2 processes gives the same tokens in the same order")

    # real tokenizer file: size and a few entries
    path = os.path.join(tmp, "gpt2_tokenizer.bin")
    dc.write_tokenizer(path, enc)
    with open(path, "rb") as f:
        data = f.read()
    check(sum(len(enc.decode_single_token_bytes(i)) + 1 for i in range(50257)) + 1024 == len(data),
          "GPT-2 tokenizer file size")
    check(data[-14:] == b"\x0d<|endoftext|>", "the last token of the file is <|endoftext|>")
    return enc


def test_tinystories_script(tmp, tiktoken_path, enc):
    stories = [[{"story": f"  Once upon a time there was story {f}.{i}. The end.\n", "source": "x"}
                for i in range(30)] for f in range(3)]
    archive = os.path.join(tmp, "stories.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        for f, items in reversed(list(enumerate(stories))):  # out of order: the script sorts names
            data = json.dumps(items).encode()
            info = tarfile.TarInfo(f"data{f:02d}.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = os.path.join(tmp, "tinystories")
    r = run_script([os.path.join(HERE, "tinystories.py"), "--archive", archive, "--output_dir", out,
                    "--shard_tokens", "400", "--workers", "2", "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 0, f"tinystories.py failed: {r.stderr.strip()}")
    names = shards_in(out, "tinystories")
    expected = np.concatenate([dc.encode_document(enc, s["story"].strip()) for items in stories for s in items])
    got = np.concatenate([dc.read_datafile(os.path.join(out, n)) for n in names])
    check(names[0] == "tinystories_val_000000.bin" and len(names) >= 3, f"tinystories shards {names}")
    check(np.array_equal(got, expected), "tinystories shards hold every story in order, each after EOT")
    check(os.path.isfile(os.path.join(out, "tokenizer.bin")), "tinystories.py writes tokenizer.bin")

    r = run_script([os.path.join(HERE, "tinystories.py"), "--archive", os.path.join(tmp, "nope.tar.gz"),
                    "--output_dir", out, "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 1 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1,
          f"missing archive: one error line, got {r.stderr!r}")


def test_failed_preparation(tmp, tiktoken_path):
    # a preparation that fails leaves no empty output folder (nor the parents it created)
    out = os.path.join(tmp, "failed", "nested", "tinyshakespeare")
    r = run_script(["dev/data/tinyshakespeare.py", "--input", os.path.join(tmp, "no_such.txt"),
                    "--output_dir", out, "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 1 and r.stderr.startswith("error: ") and "no such file" in r.stderr,
          f"tinyshakespeare.py with a missing --input: one error line ({r.stderr.strip()})")
    check(not os.path.exists(os.path.join(tmp, "failed")), "a failed preparation removes the folders it created")


def test_fineweb_script(tmp, tiktoken_path, enc):
    jsonl = os.path.join(tmp, "pages.jsonl")
    texts = [f"Page {i}. " + "Some web text here. " * (i % 5 + 1) for i in range(120)]
    with open(jsonl, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t, "id": "x"}) + "\n")
    expected = np.concatenate([dc.encode_document(enc, t) for t in texts])

    out = os.path.join(tmp, "fineweb")
    r = run_script([os.path.join(HERE, "fineweb.py"), "--local_jsonl", jsonl, "--output_dir", out,
                    "--shard_tokens", "500", "--workers", "2", "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 0, f"fineweb.py failed: {r.stderr.strip()}")
    names = shards_in(out, "fineweb")
    check(names[:3] == ["fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"],
          f"fineweb shard names {names}")
    got = np.concatenate([dc.read_datafile(os.path.join(out, n)) for n in names])
    check(np.array_equal(got, expected), "fineweb shards hold every page in order, each after EOT")

    out2 = os.path.join(tmp, "fineweb_max")
    r = run_script([os.path.join(HERE, "fineweb.py"), "--local_jsonl", jsonl, "--output_dir", out2,
                    "--shard_tokens", "500", "--max_shards", "3", "--workers", "2",
                    "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 0, f"fineweb.py --max_shards failed: {r.stderr.strip()}")
    sizes = [len(dc.read_datafile(os.path.join(out2, n))) for n in shards_in(out2, "fineweb")]
    check(sizes == [500, 500, 500], f"--max_shards 3 writes three full shards, got {sizes}")


def read_evalfile(path):
    """The (context, completions, label) of every example of an eval file, read per the format."""
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:4 * dc.HEADER_INTS], dtype="<i4")
    s = np.frombuffer(data[4 * dc.HEADER_INTS:], dtype="<u2").astype(int)
    examples, p, longest = [], 0, 0
    for index in range(int(header[2])):
        check(s[p] == dc.EVAL_START and s[p + 2] == index, f"{path}: example {index} starts with 65535, its index")
        start, label, k = p, int(s[p + 3]), int(s[p + 4])
        p += 5
        context = [int(t) for t in s[p + 1:p + 1 + s[p]]]
        p += 1 + s[p]
        completions = []
        for _ in range(k):
            completions.append([int(t) for t in s[p + 1:p + 1 + s[p]]])
            p += 1 + s[p]
        check(s[start + 1] == 2 * (p - start), f"{path}: example {index}'s size field is its size")
        longest = max(longest, 2 * (p - start))
        examples.append((context, completions, label))
    check(list(header[:4]) == [dc.EVAL_MAGIC, dc.EVAL_VERSION, len(examples), longest] and p == len(s),
          f"{path}: header (magic, version, examples, longest) and nothing after the last example")
    return examples


def test_hellaswag_script(tmp, tiktoken_path, enc):
    items = [{"ind": i, "ctx": f"A person is doing thing {i}. They", "label": i % 4,
              "endings": [f"stop after {j} minutes." for j in range(4)], "split": "val"} for i in range(6)]
    jsonl = os.path.join(tmp, "hellaswag_val.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item) + "\n")
    out = os.path.join(tmp, "hellaswag", "val.bin")
    r = run_script([os.path.join(HERE, "hellaswag.py"), "--input", jsonl, "--output", out,
                    "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 0, f"hellaswag.py failed: {r.stderr.strip()}")
    if r.returncode != 0:
        return
    got = read_evalfile(out)
    want = [(enc.encode_ordinary(it["ctx"]), [enc.encode_ordinary(" " + e) for e in it["endings"]], it["label"])
            for it in items]
    check(got == want, "hellaswag.py: every example's context, endings (after a space) and label")
    with open(jsonl, "a", encoding="utf-8") as f:
        f.write(json.dumps({"ctx": "x", "endings": ["a"], "label": 3}) + "\n")
    r = run_script([os.path.join(HERE, "hellaswag.py"), "--input", jsonl, "--output", out,
                    "--tiktoken", tiktoken_path], REPO)
    check(r.returncode == 1 and r.stderr.startswith("error: ") and "label 3 of 1 endings" in r.stderr,
          f"hellaswag.py: a label out of range is one error line ({r.stderr.strip()})")


def test_prepare_bytes(tmp, enc=None):
    """prepare.py --bytes: the shards are the file's bytes, split at a line end, with GPT-2's byte ids."""
    lines = [f"line {i}: caf\u00e9 \U0001F600 {'x' * (i % 13)}\n" for i in range(300)]
    text = "".join(lines).encode("utf-8")
    path = os.path.join(tmp, "bytes.txt")
    with open(path, "wb") as f:
        f.write(text)
    out = os.path.join(tmp, "bytes_out")
    r = run_script([os.path.join(HERE, "prepare.py"), "--input", path, "--bytes", "--output_dir", out,
                    "--name", "b", "--val_tokens", "1000"], cwd=tmp)
    check(r.returncode == 0, f"prepare.py --bytes runs ({r.stderr.strip()[-200:]})")
    if r.returncode != 0:
        return
    val = dc.read_datafile(os.path.join(out, "b_val.bin"))
    train = dc.read_datafile(os.path.join(out, "b_train.bin"))
    table = dc.byte_token_table()
    inverse = {int(t): b for b, t in enumerate(table)}
    decoded = bytes(inverse[int(t)] for t in np.concatenate([val, train]))
    check(decoded == text, "--bytes: validation + training tokens are the file's bytes, in order")
    check(len(val) <= 1000 and decoded[len(val) - 1:len(val)] == b"\n" and len(val) > 900,
          f"--bytes: the validation split ends at the last line end within --val_tokens ({len(val)} tokens)")
    check(len(set(int(t) for t in table)) == 256 and int(table.max()) == 255, "--bytes: 256 distinct byte ids")
    check([int(table[ord(c)]) for c in "0+=\n"] == [15, 10, 28, 198],
          "--bytes: '0' '+' '=' newline are 15, 10, 28, 198 (as common/arithmetic.h)")
    with open(os.path.join(out, "tokenizer.bin"), "rb") as f:
        tok = f.read()
    header = np.frombuffer(tok[:1024], dtype="<i4")
    check(list(header[:4]) == [dc.TOKENIZER_MAGIC, dc.TOKENIZER_VERSION, 257, 256], "--bytes: tokenizer header V 257, EOT 256")
    # the C trainer's arithmetic data writes its own byte-level tokenizer: the same file, byte for byte
    arith = os.path.join(REPO, "dev", "data", "arithmetic")
    if os.access(arith, os.X_OK):
        subprocess.run([arith, os.path.join(tmp, "arith"), "-n", "10", "-m", "10"], check=True, capture_output=True)
        with open(os.path.join(tmp, "arith", "tokenizer.bin"), "rb") as f:
            check(f.read() == tok, "--bytes: tokenizer.bin equals the one common/arithmetic.h writes")
    else:
        print("skipped the comparison with common/arithmetic.h's tokenizer: build dev/data/arithmetic (make dev/data/arithmetic)")
    if enc is not None:
        check(all(enc.decode_single_token_bytes(int(table[b])) == bytes([b]) for b in range(256)),
              "--bytes: every byte's id is GPT-2's token for that single byte")


def main():
    parser = argparse.ArgumentParser(description="offline tests of dev/data")
    parser.add_argument("--tiktoken", default=None, metavar="PATH")
    args = parser.parse_args()
    tiktoken_path = args.tiktoken or os.environ.get("GPT2_TIKTOKEN") or \
        os.path.join(REPO, "..", "shared", "data", "gpt2.tiktoken")

    with tempfile.TemporaryDirectory() as tmp:
        test_datafile(tmp)
        test_tokenizer_file(tmp)
        test_split_documents()
        test_shard_writer(tmp)
        try:
            import tiktoken  # noqa: F401
            have_gpt2 = os.path.isfile(tiktoken_path)
        except ImportError:
            have_gpt2 = False
        enc = None
        if have_gpt2:
            enc = test_gpt2(tmp, tiktoken_path)
            test_tinystories_script(tmp, tiktoken_path, enc)
            test_fineweb_script(tmp, tiktoken_path, enc)
            test_failed_preparation(tmp, tiktoken_path)
            test_hellaswag_script(tmp, tiktoken_path, enc)
        test_prepare_bytes(tmp, enc)
        if not have_gpt2:
            print(f"skipped the GPT-2 tests: need the tiktoken package and {tiktoken_path} (--tiktoken PATH)")
    if failures:
        print(f"test_data_common: {failures} check(s) FAILED")
        sys.exit(1)
    print("test_data_common: all checks passed")


if __name__ == "__main__":
    main()
