"""
dev/data/prepare.py: turn any local UTF-8 text file into GPT-2 token shards.

    python dev/data/prepare.py --input notes.txt --tiktoken /path/to/gpt2.tiktoken
    python dev/data/prepare.py --input big.txt --shard_tokens 10000000 --workers 4

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

from data_common import (DataError, ShardWriter, add_tiktoken_arg, gpt2_encoding, run_main,
                         split_documents, tokenize_documents, write_tokenizer)


def positive_int(s):
    value = int(s.replace("_", ""))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{s} is not a positive integer")
    return value


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
    add_tiktoken_arg(parser)
    args = parser.parse_args()

    if not os.path.isfile(args.input):
        raise DataError(f"--input {args.input}: no such file")
    name = args.name or os.path.splitext(os.path.basename(args.input))[0]
    if not name or "/" in name:
        raise DataError(f"--name {name!r} is not a usable file name prefix")
    output_dir = args.output_dir or os.path.join("data", name)

    try:
        with open(args.input, "r", encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise DataError(f"{args.input}: not valid UTF-8 ({e})") from None
    documents = split_documents(text, args.split)
    enc = gpt2_encoding(args.tiktoken)  # fails early, before the workers start, if there is none
    parts = list(tokenize_documents(documents, args.tiktoken, args.workers))
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
