"""
dev/data/data_common.py: what every data-preparation script here shares.

The trainers read two kinds of binary files that this module writes (see doc/formats.md):

  token shard   256 int32 header (magic 20240520, version 1, number of tokens N), then N uint16 ids
  tokenizer     256 int32 header (magic 20240328, version 2, vocab size V, end-of-text id), then for
                every id 0..V-1 in order: one uint8 length n and the token's n raw bytes

Conventions:
  * every document is preceded by the end-of-text token (<|endoftext|>, id 50256 for GPT-2), so a
    model trained on the shards learns that 50256 means "a new, unrelated text starts here";
  * the first shard (or the first --val_tokens tokens) is the validation split, the rest is training;
  * every file is written atomically: to "<path>.tmp" first, then renamed over <path>, so a crash
    never leaves a half-written shard under its real name.

Errors the user can fix (no tokenizer file, a missing package, an input that is too short) raise
DataError; the scripts print it as one line "error: ..." and exit with status 1 (see run_main).
"""

import importlib.util
import os
import re
import sys

import numpy as np

from progress import Progress  # noqa: F401 (the scripts take it from here; standard library only)

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2
HEADER_INTS = 256  # both headers are 256 int32 = 1024 bytes

GPT2_VOCAB_SIZE = 50257
GPT2_EOT = 50256  # id of <|endoftext|>
GPT2_MERGEABLE_TOKENS = 50256  # ids 0..50255 come from gpt2.tiktoken, 50256 is the special token

# GPT-2's pre-tokenizer: before byte-pair merging, text is cut into pieces by this regex and merges
# never cross a piece boundary. In words, a piece is one of
#   an English contraction suffix:              's 't 're 've 'm 'll 'd
#   an optional space + a run of letters:       " hello"
#   an optional space + a run of digits:        " 2024"
#   an optional space + a run of other symbols: " ?!"
#   whitespace that is not followed by a non-space (so that a run of spaces leaves its last space
#   to be the prefix of the next word), or else any remaining whitespace.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d"""
    r"""| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+"""
    r"""|\s+(?!\S)|\s+"""
)
GPT2_SPECIAL_TOKENS = {"<|endoftext|>": GPT2_EOT}


class DataError(Exception):
    """A problem the user can fix; printed as one line 'error: ...'."""


def run_main(main):
    """Run main(); print a DataError as one 'error: ...' line and exit 1. A failed run (an error,
    Ctrl-C) removes the folders ensure_dir created that are still empty, so that it leaves nothing
    that looks like a prepared dataset."""
    try:
        main()
    except DataError as e:
        remove_created_empty_dirs()
        sys.stdout.flush()
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except BaseException:
        remove_created_empty_dirs()
        raise


# ----------------------------------------------------------------------------
# atomic writes

def _atomic_write_bytes(path, chunks):
    """Write the byte strings in `chunks` to path via path.tmp + fsync + rename."""
    tmp_path = path + ".tmp"
    try:
        with open(tmp_path, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise


_created_dirs = []  # folders ensure_dir created, outermost first


def ensure_dir(path):
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    _created_dirs.extend(reversed(missing))
    if not os.access(path, os.W_OK):
        raise DataError(f"output folder {path} is not writable")


def remove_created_empty_dirs():
    """Remove the folders ensure_dir created, innermost first, where they are still empty."""
    while _created_dirs:
        try:
            os.rmdir(_created_dirs.pop())
        except OSError:
            pass


# ----------------------------------------------------------------------------
# token shards

def write_datafile(path, tokens):
    """Write a token shard: header (magic, version, count) then the ids as uint16."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"{path}: tokens must be a 1-D sequence, got shape {tokens.shape}")
    if len(tokens) >= 2**31:
        raise ValueError(f"{path}: {len(tokens)} tokens do not fit the int32 count in the header")
    if len(tokens) > 0:
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"{path}: token ids must be integers, got {tokens.dtype}")
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= 2**16:
            raise ValueError(f"{path}: token ids must lie in [0, 65535] to be stored as uint16, "
                             f"got min {lo} and max {hi}")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = SHARD_MAGIC
    header[1] = SHARD_VERSION
    header[2] = len(tokens)
    body = tokens.astype("<u2")
    _atomic_write_bytes(path, [header.tobytes(), body.tobytes()])


def read_datafile(path):
    """Read a token shard back (used by tests); checks the header and the size."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * HEADER_INTS:
        raise ValueError(f"{path}: too small for a shard header")
    header = np.frombuffer(data[:4 * HEADER_INTS], dtype="<i4")
    if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise ValueError(f"{path}: not a version-1 token shard")
    n = int(header[2])
    if len(data) != 4 * HEADER_INTS + 2 * n:
        raise ValueError(f"{path}: header says {n} tokens but the file size disagrees")
    return np.frombuffer(data[4 * HEADER_INTS:], dtype="<u2").astype(np.int64)


# ----------------------------------------------------------------------------
# multiple-choice eval file (llm.c's format, read by common/eval.h)

EVAL_MAGIC = 20240522
EVAL_VERSION = 1
EVAL_START = 65535


def write_evalfile(path, examples):
    """Write a multiple-choice eval file. `examples` is a list of (context, completions, label): the
    context a list of token ids, completions a list of lists of token ids, label the index of the
    right completion. Header: 256 int32 (magic, version, number of examples, the longest example in
    bytes); then per example a stream of uint16: 65535, its size in bytes (these fields included),
    its index, the label, the number of completions, the context's length and tokens, and each
    completion's length and tokens."""
    if not 0 < len(examples) <= 65535:
        raise ValueError(f"{path}: {len(examples)} examples (1 to 65535 fit the format)")
    stream = []
    longest = 0
    for index, (context, completions, label) in enumerate(examples):
        if not 0 <= label < len(completions) or len(context) == 0 or any(len(c) == 0 for c in completions):
            raise ValueError(f"{path}: example {index}: label {label} of {len(completions)} completions, "
                             f"or an empty context or completion")
        fields = [EVAL_START, 0, index, label, len(completions), len(context), *context]
        for c in completions:
            fields += [len(c), *c]
        if max(fields) > 65535 or min(fields) < 0 or 2 * len(fields) > 65535:
            raise ValueError(f"{path}: example {index} does not fit the format's 16-bit fields")
        fields[1] = 2 * len(fields)
        longest = max(longest, fields[1])
        stream += fields
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:4] = [EVAL_MAGIC, EVAL_VERSION, len(examples), longest]
    _atomic_write_bytes(path, [header.tobytes(), np.array(stream, dtype="<u2").tobytes()])


# ----------------------------------------------------------------------------
# tokenizer file for the C decoder

def write_tokenizer(path, enc):
    """Write the byte string of every token id of a tiktoken Encoding, in id order."""
    vocab_size = enc.n_vocab
    eot = enc.eot_token
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0] = TOKENIZER_MAGIC
    header[1] = TOKENIZER_VERSION
    header[2] = vocab_size
    header[3] = eot
    chunks = [header.tobytes()]
    for i in range(vocab_size):
        b = enc.decode_single_token_bytes(i)
        if len(b) > 255:
            raise ValueError(f"token {i} has {len(b)} bytes; the file format allows at most 255")
        chunks.append(bytes([len(b)]) + b)
    _atomic_write_bytes(path, chunks)


# ----------------------------------------------------------------------------
# byte-level tokens: one token per byte, with GPT-2's own id for each single byte (as the
# arithmetic data of common/arithmetic.h): the 188 printable bytes '!'..'~', 0xA1..0xAC,
# 0xAE..0xFF in that order are ids 0..187, the other 68 bytes in order 188..255, and
# <|endoftext|> is id 256 (V = 257). A byte-level model therefore reads GPT-2 shards' byte
# tokens the same way, and the trainers' decoder prints its samples.

BYTE_VOCAB_SIZE = 257
BYTE_EOT = 256


def _byte_is_printable(b):
    return 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF


def byte_token_table():
    """ids[b] = the token id of byte b (a uint16 array of 256)."""
    printable = [b for b in range(256) if _byte_is_printable(b)]
    other = [b for b in range(256) if not _byte_is_printable(b)]
    ids = np.zeros(256, dtype=np.uint16)
    for token, b in enumerate(printable + other):
        ids[b] = token
    return ids


def encode_bytes(data):
    """The byte-level tokens of a bytes object."""
    return byte_token_table()[np.frombuffer(data, dtype=np.uint8)]


class ByteEncoding:
    """The 257-token byte-level vocabulary, with the part of tiktoken's interface write_tokenizer uses."""
    n_vocab = BYTE_VOCAB_SIZE
    eot_token = BYTE_EOT

    def __init__(self):
        self._bytes = [b""] * BYTE_VOCAB_SIZE
        for b, token in enumerate(byte_token_table()):
            self._bytes[int(token)] = bytes([b])
        self._bytes[BYTE_EOT] = b"<|endoftext|>"

    def decode_single_token_bytes(self, token):
        return self._bytes[token]


# ----------------------------------------------------------------------------
# the GPT-2 tokenizer, built from a local gpt2.tiktoken

def _whisper_tiktoken_path():
    """The gpt2.tiktoken shipped by openai-whisper, located without importing whisper (and torch)."""
    try:
        spec = importlib.util.find_spec("whisper")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = os.path.join(folder, "assets", "gpt2.tiktoken")
        if os.path.isfile(candidate):
            return candidate
    return None


def find_gpt2_tiktoken(tiktoken_path=None):
    """Where to read GPT-2's merge ranks from: the argument, $GPT2_TIKTOKEN, openai-whisper's copy."""
    if tiktoken_path is not None:
        if not os.path.isfile(tiktoken_path):
            raise DataError(f"--tiktoken {tiktoken_path}: no such file")
        return tiktoken_path
    env_path = os.environ.get("GPT2_TIKTOKEN")
    if env_path:
        if not os.path.isfile(env_path):
            raise DataError(f"GPT2_TIKTOKEN={env_path}: no such file")
        return env_path
    return _whisper_tiktoken_path()


def import_tiktoken():
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        raise DataError("the tiktoken package is needed: pip install tiktoken") from None
    return tiktoken


def gpt2_encoding(tiktoken_path=None):
    """
    A tiktoken.Encoding for GPT-2, built from a local gpt2.tiktoken file (merge ranks).
    Looks in order at: tiktoken_path, $GPT2_TIKTOKEN, whisper/assets/gpt2.tiktoken of an installed
    openai-whisper; failing all three it tries tiktoken.get_encoding("gpt2"), which downloads the
    vocabulary and therefore needs internet access.
    """
    tiktoken = import_tiktoken()
    path = find_gpt2_tiktoken(tiktoken_path)
    if path is None:
        print("note: no local gpt2.tiktoken (--tiktoken PATH, $GPT2_TIKTOKEN or openai-whisper); "
              "trying tiktoken.get_encoding('gpt2'), which needs internet access", file=sys.stderr)
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # no network, blocked host, ...
            raise DataError("no GPT-2 vocabulary: pass --tiktoken PATH to a local gpt2.tiktoken "
                            "(or set GPT2_TIKTOKEN); downloading it with tiktoken.get_encoding('gpt2') "
                            f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(path)
    except Exception as e:
        raise DataError(f"{path}: cannot read as a tiktoken BPE file: {e}") from None
    if len(ranks) != GPT2_MERGEABLE_TOKENS or sorted(ranks.values()) != list(range(GPT2_MERGEABLE_TOKENS)):
        raise DataError(f"{path}: expected GPT-2's {GPT2_MERGEABLE_TOKENS} ranks 0..{GPT2_MERGEABLE_TOKENS - 1}, "
                        f"got {len(ranks)} entries")
    return tiktoken.Encoding(
        name="gpt2",
        pat_str=GPT2_SPLIT_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=GPT2_SPECIAL_TOKENS,
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def encode_document(enc, text):
    """One document -> [eot] + its tokens, as uint16. Special-token text inside it is plain text."""
    ids = enc.encode_ordinary(text)
    out = np.empty(len(ids) + 1, dtype=np.uint16)
    out[0] = enc.eot_token
    out[1:] = ids
    return out


def split_documents(text, mode="blank"):
    """
    Cut a text into documents; "".join(documents) == text, nothing is dropped.
      blank: a document ends after a run of blank lines (lines holding at most spaces, tabs, \\r),
             which stay attached to the end of the document before them
      line:  every line is a document (with its newline)
      none:  the whole text is one document
    """
    if mode == "none":
        return [text] if text else []
    if mode == "line":
        lines = text.split("\n")
        return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    if mode != "blank":
        raise ValueError(f"unknown document split mode {mode!r}")
    documents, start = [], 0
    for m in re.finditer(r"\n(?:[ \t\r]*\n)+", text):
        documents.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        documents.append(text[start:])
    return documents


# ----------------------------------------------------------------------------
# tokenizing many documents on several processes

_worker_enc = None


def _worker_init(tiktoken_path):
    global _worker_enc
    _worker_enc = gpt2_encoding(tiktoken_path)


def _worker_encode(text):
    return encode_document(_worker_enc, text)


def tokenize_documents(texts, tiktoken_path=None, workers=1, chunksize=16):
    """
    Yield encode_document(text) for every text of the iterable, in order. With workers > 1 the
    encoding runs on a multiprocessing pool (each worker builds its own Encoding from the same file,
    which is why this takes a path and not an Encoding object).
    """
    if workers <= 1:
        enc = gpt2_encoding(tiktoken_path)
        for text in texts:
            yield encode_document(enc, text)
        return
    import multiprocessing as mp
    path = find_gpt2_tiktoken(tiktoken_path)  # resolve once so that all workers read the same file
    with mp.Pool(workers, initializer=_worker_init, initargs=(path,)) as pool:
        yield from pool.imap(_worker_encode, texts, chunksize=chunksize)


# ----------------------------------------------------------------------------
# splitting a token stream into shards

class ShardWriter:
    """
    Cuts a stream of tokens into shard files. The first shard is the validation split and holds
    val_tokens tokens (default: shard_tokens); every later one is a training shard of shard_tokens
    tokens (None: unlimited, i.e. a single training file). Documents may straddle two shards.

    File names: numbered=True  -> {name}_val_000000.bin, {name}_train_000001.bin, ...
                numbered=False -> {name}_val.bin, {name}_train.bin (needs shard_tokens=None)

    A last training shard shorter than half a shard is appended to the previous training shard
    instead of being written on its own, so that no shard is too small for a trainer's batch.
    """

    def __init__(self, output_dir, name, shard_tokens, val_tokens=None, numbered=True, verbose=True):
        if shard_tokens is not None and shard_tokens <= 0:
            raise ValueError("shard_tokens must be positive or None")
        if not numbered and shard_tokens is not None:
            raise ValueError("un-numbered file names allow a single training shard (shard_tokens=None)")
        self.val_tokens = shard_tokens if val_tokens is None else val_tokens
        if self.val_tokens is None or self.val_tokens <= 0:
            raise ValueError("the validation split needs a positive number of tokens")
        self.output_dir = output_dir
        self.name = name
        self.shard_tokens = shard_tokens
        self.numbered = numbered
        self.verbose = verbose
        self.pending = []         # arrays of tokens not yet written
        self.num_pending = 0
        self.index = 0            # index of the next shard to write
        self.written = []         # (path, number of tokens) of every shard written so far
        self.last_train = None    # tokens of the last training shard (for merging a short tail)
        self.closed = False
        ensure_dir(output_dir)

    def path(self, index):
        split = "val" if index == 0 else "train"
        if self.numbered:
            return os.path.join(self.output_dir, f"{self.name}_{split}_{index:06d}.bin")
        return os.path.join(self.output_dir, f"{self.name}_{split}.bin")

    def _target(self):
        return self.val_tokens if self.index == 0 else self.shard_tokens

    def add(self, tokens):
        assert not self.closed, "add() after close()"
        tokens = np.asarray(tokens)
        if len(tokens) == 0:
            return
        if tokens.dtype != np.uint16:
            if int(tokens.min()) < 0 or int(tokens.max()) >= 2**16:
                raise ValueError("token ids must lie in [0, 65535]")
            tokens = tokens.astype(np.uint16)
        self.pending.append(tokens)
        self.num_pending += len(tokens)
        target = self._target()
        while target is not None and self.num_pending >= target:
            everything = np.concatenate(self.pending)
            self._write(everything[:target])
            rest = everything[target:]
            self.pending = [rest] if len(rest) else []
            self.num_pending = len(rest)
            target = self._target()

    def _write(self, tokens):
        path = self.path(self.index)
        write_datafile(path, tokens)
        self.written.append((path, len(tokens)))
        if self.index > 0:
            self.last_train = tokens
        if self.verbose:
            print(f"wrote {len(tokens):,} tokens to {path}")
        self.index += 1

    def close(self, write_tail=True):
        """
        Write what is left (unless write_tail is False, e.g. after stopping at a maximum number of
        shards); returns the list of (path, number of tokens) of all shards written.
        """
        if self.closed:
            return self.written
        self.closed = True
        if self.num_pending == 0 or not write_tail:
            self.pending, self.num_pending = [], 0
            return self.written
        tail = np.concatenate(self.pending)
        self.pending, self.num_pending = [], 0
        short = self.shard_tokens is not None and len(tail) < self.shard_tokens // 2
        if self.index > 1 and short:
            # merge the short tail into the previous training shard (rewritten atomically)
            path, n = self.written.pop()
            merged = np.concatenate([self.last_train, tail])
            write_datafile(path, merged)
            self.written.append((path, len(merged)))
            self.last_train = merged
            if self.verbose:
                print(f"appended the last {len(tail):,} tokens to {path} ({len(merged):,} tokens)")
        else:
            self._write(tail)
        return self.written

    def num_train_tokens(self):
        return sum(n for path, n in self.written[1:])

    def num_val_tokens(self):
        return self.written[0][1] if self.written else 0


# ----------------------------------------------------------------------------
# downloads (standard library only; for the scripts that fetch data from the internet)

def download(url, path, chunk_bytes=1 << 20):
    """Download url to path (via path.tmp) unless path exists already; prints progress."""
    if os.path.exists(path):
        print(f"{path} already exists, not downloading it again")
        return path
    import urllib.request
    tmp_path = path + ".tmp"
    print(f"downloading {url}")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp_path, "wb") as f:
            total = int(response.headers.get("Content-Length") or 0)
            done = 0
            while True:
                chunk = response.read(chunk_bytes)
                if not chunk:
                    break
                f.write(chunk)
                done += len(chunk)
                if total:
                    print(f"\r  {done / 2**20:.1f} / {total / 2**20:.1f} MiB", end="", flush=True)
            if total:
                print()
            if total and done != total:
                raise DataError(f"download of {url} stopped after {done} of {total} bytes")
        os.replace(tmp_path, path)
    except DataError:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise
    except Exception as e:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise DataError(f"cannot download {url}: {e} (no internet? pass a local file instead)") from None
    return path


def add_tiktoken_arg(parser):
    parser.add_argument("--tiktoken", default=None, metavar="PATH",
                        help="local gpt2.tiktoken (GPT-2 merge ranks); default: $GPT2_TIKTOKEN, "
                             "then openai-whisper's copy, then tiktoken.get_encoding('gpt2') (internet)")
