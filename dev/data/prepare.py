"""
dev/data/prepare.py: turn any local UTF-8 text file into GPT-2 token shards, or byte-level ones.

    python dev/data/prepare.py --input notes.txt --tiktoken /path/to/gpt2.tiktoken
    python dev/data/prepare.py --input big.txt --shard_tokens 10000000 --workers 4
    python dev/data/prepare.py --input ../shared/data/tinyshakespeare.txt --bytes --name shakespeare_char

--bytes: one token per byte of the file (the classic character-level baseline), with GPT-2's id
for each single byte and <|endoftext|> at 256, V = 257, as the arithmetic data (data_common.py,
"byte-level tokens"). No tokenizer file is needed and no document markers are added. The
validation split is the first 10%% of the bytes (or --val_tokens), cut back to the end of a line
so that no line is split between validation and training.

The text is cut into documents (--split: at blank lines, at every line, or not at all), each
document is preceded by <|endoftext|> (50256), the first --val_tokens tokens become the
validation split and the rest training shards. Files, in --output_dir (default data/NAME):

    without --shard_tokens:  NAME_val.bin, NAME_train.bin
    with --shard_tokens N:   NAME_val_000000.bin, NAME_train_000001.bin, NAME_train_000002.bin, ...
                             (training shards of N tokens; a last shard shorter than N/2 is
                             appended to the one before it)
    and tokenizer.bin (GPT-2's token bytes, for the trainers' decoder).

The trainers then take e.g. -i "data/NAME/NAME_train*.bin" -j "data/NAME/NAME_val*.bin".
"""

import argparse
import os

import numpy as np

from data_common import (BYTE_VOCAB_SIZE, ByteEncoding, DataError, Progress, ShardWriter, add_tiktoken_arg, encode_bytes, gpt2_encoding, run_main,
                         split_documents, tokenize_documents, write_tokenizer)


def positive_int(s):
    value = int(s.replace("_", ""))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{s} is not a positive integer")
    return value


def prepare_bytes(args, name, output_dir):
    """--bytes: the validation split is the first lines, about val_tokens bytes; training the rest."""
    with open(args.input, "rb") as f:
        data = f.read()
    val_tokens = args.val_tokens if args.val_tokens is not None else max(1, len(data) // 10)
    if len(data) <= val_tokens:
        raise DataError(f"{args.input}: only {len(data)} bytes, need more than the "
                        f"{val_tokens} of the validation split (see --val_tokens)")
    cut = data.rfind(b"\n", 0, val_tokens) + 1  # just after the last newline inside the split
    if cut == 0:
        cut = val_tokens  # no newline in it: cut inside the line
    tokens = encode_bytes(data)
    print(f"{args.input}: {len(data):,} bytes = tokens, validation the first {cut:,}")
    writer = ShardWriter(output_dir, name, shard_tokens=args.shard_tokens, val_tokens=cut,
                         numbered=args.shard_tokens is not None)
    writer.add(tokens)
    writer.close()
    tokenizer_path = os.path.join(output_dir, "tokenizer.bin")
    write_tokenizer(tokenizer_path, ByteEncoding())
    print(f"wrote the {BYTE_VOCAB_SIZE}-token byte-level tokenizer to {tokenizer_path}")
    print(f"val: {writer.num_val_tokens():,} tokens, train: {writer.num_train_tokens():,} tokens "
          f"in {len(writer.written) - 1} shard(s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, metavar="PATH", help="UTF-8 text file")
    parser.add_argument("--output_dir", default=None, help="default: data/NAME")
    parser.add_argument("--name", default=None, help="file name prefix (default: the input's name)")
    parser.add_argument("--val_tokens", type=positive_int, default=None,
                        help="tokens in the validation split (default: 10%% of all tokens)")
    parser.add_argument("--shard_tokens", type=positive_int, default=None,
                        help="tokens per training shard (default: one training file)")
    parser.add_argument("--split", choices=["blank", "line", "none"], default="blank",
                        help="document boundaries: blank lines (default), every line, none")
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="processes that tokenize documents in parallel")
    parser.add_argument("--bytes", action="store_true",
                        help="byte-level tokens (V = 257) instead of GPT-2's BPE; --split, --workers unused")
    add_tiktoken_arg(parser)
    args = parser.parse_args()

    if not os.path.isfile(args.input):
        raise DataError(f"--input {args.input}: no such file")
    name = args.name or os.path.splitext(os.path.basename(args.input))[0]
    if not name or "/" in name:
        raise DataError(f"--name {name!r} is not a usable file name prefix")
    output_dir = args.output_dir or os.path.join("data", name)

    if args.bytes:
        prepare_bytes(args, name, output_dir)
        return
    try:
        with open(args.input, "r", encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise DataError(f"{args.input}: not valid UTF-8 ({e})") from None
    documents = split_documents(text, args.split)
    enc = gpt2_encoding(args.tiktoken)  # fails early, before the workers start, if there is none
    progress = Progress("tokenizing", total=len(documents), unit="documents")
    parts = []
    for part in tokenize_documents(documents, args.tiktoken, args.workers):
        parts.append(part)
        progress.update()
    progress.close()
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)
    print(f"{args.input}: {len(text):,} characters, {len(documents):,} documents, {len(tokens):,} tokens")

    val_tokens = args.val_tokens if args.val_tokens is not None else max(1, len(tokens) // 10)
    if len(tokens) <= val_tokens:
        raise DataError(f"{args.input}: only {len(tokens)} tokens, need more than the "
                        f"{val_tokens} of the validation split (see --val_tokens)")

    writer = ShardWriter(output_dir, name, shard_tokens=args.shard_tokens, val_tokens=val_tokens,
                         numbered=args.shard_tokens is not None)
    writer.add(tokens)
    writer.close()
    tokenizer_path = os.path.join(output_dir, "tokenizer.bin")
    write_tokenizer(tokenizer_path, enc)
    print(f"wrote the {enc.n_vocab}-token tokenizer to {tokenizer_path}")
    print(f"val: {writer.num_val_tokens():,} tokens, train: {writer.num_train_tokens():,} tokens "
          f"in {len(writer.written) - 1} shard(s)")


if __name__ == "__main__":
    run_main(main)
