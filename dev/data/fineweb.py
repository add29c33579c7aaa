"""
dev/data/fineweb.py: tokenize a FineWeb sample (HuggingFaceFW/fineweb) with GPT-2's tokenizer.

    pip install datasets
    python dev/data/fineweb.py --version 10B --tiktoken /path/to/gpt2.tiktoken --workers 16

Streams the "sample-10BT" (about 10 billion GPT-2 tokens, 20 GB of shards) or "sample-100BT"
subset with the Hugging Face `datasets` package; apart from the `datasets` cache only the output
shards are kept on disk. Every web page is one document, preceded by <|endoftext|> (50256).
Shards hold --shard_tokens tokens (default 100 million, 200 MB each); the first shard is the
validation split:

    fineweb_val_000000.bin, fineweb_train_000001.bin, fineweb_train_000002.bin, ..., tokenizer.bin

in --output_dir (default data/fineweb10B or data/fineweb100B). --max_shards stops early, e.g. to
get the validation shard and a few training shards for a short run. --local_jsonl reads documents
from a local JSON-lines file (one {"text": ...} object per line) instead of streaming, which is how
this script is tested offline.
"""

import argparse
import json
import os

from data_common import (DataError, Progress, ShardWriter, add_tiktoken_arg, gpt2_encoding, run_main,
                         tokenize_documents, write_tokenizer)

DATASET = "HuggingFaceFW/fineweb"
SUBSETS = {"10B": "sample-10BT", "100B": "sample-100BT"}


def stream_fineweb(version):
    """Texts of the FineWeb sample, streamed (needs internet and the datasets package)."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise DataError("fineweb.py streams the data with Hugging Face datasets: pip install datasets") from None
    dataset = load_dataset(DATASET, name=SUBSETS[version], split="train", streaming=True)
    for row in dataset:
        yield row["text"]


def read_jsonl(path):
    """Texts of a local JSON-lines file, one {"text": ...} object per line."""
    with open(path, "r", encoding="utf-8") as f:
        for line_number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (ValueError, KeyError, TypeError):
                raise DataError(f"{path}:{line_number}: expected a JSON object with a \"text\" string") from None
            if not isinstance(text, str):
                raise DataError(f"{path}:{line_number}: \"text\" is not a string")
            yield text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", choices=sorted(SUBSETS), default="10B",
                        help="which FineWeb sample: 10B or 100B tokens")
    parser.add_argument("--output_dir", default=None, help="default: data/fineweb10B or data/fineweb100B")
    parser.add_argument("--shard_tokens", type=int, default=100_000_000, help="tokens per shard")
    parser.add_argument("--max_shards", type=int, default=None,
                        help="stop after writing this many shards (validation shard included)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--local_jsonl", default=None, metavar="PATH",
                        help="read documents from a local JSON-lines file instead of streaming FineWeb")
    add_tiktoken_arg(parser)
    args = parser.parse_args()
    if args.shard_tokens <= 0 or args.workers <= 0 or (args.max_shards is not None and args.max_shards < 2):
        raise DataError("--shard_tokens and --workers must be positive and --max_shards at least 2")
    output_dir = args.output_dir or os.path.join("data", f"fineweb{args.version}")

    enc = gpt2_encoding(args.tiktoken)  # fail early, before streaming starts, if there is none
    if args.local_jsonl is not None:
        if not os.path.isfile(args.local_jsonl):
            raise DataError(f"--local_jsonl {args.local_jsonl}: no such file")
        texts = read_jsonl(args.local_jsonl)
    else:
        texts = stream_fineweb(args.version)

    writer = ShardWriter(output_dir, "fineweb", shard_tokens=args.shard_tokens)
    documents = tokenize_documents(texts, args.tiktoken, args.workers, chunksize=16)
    stopped_early = False
    # with --max_shards the tokens to write are known; otherwise the count and the rate
    progress = Progress("tokenizing", unit="tokens",
                        total=args.max_shards * args.shard_tokens if args.max_shards is not None else None)
    for tokens in documents:
        writer.add(tokens)
        progress.update(len(tokens))
        if args.max_shards is not None and len(writer.written) >= args.max_shards:
            stopped_early = True
            break
    progress.close()
    documents.close()  # stops the worker processes if we left the loop early
    writer.close(write_tail=not stopped_early)
    if len(writer.written) < 2:
        raise DataError(f"only {writer.num_val_tokens()} tokens: not more than one shard, so no "
                        f"training split (lower --shard_tokens)")
    tokenizer_path = os.path.join(output_dir, "tokenizer.bin")
    write_tokenizer(tokenizer_path, enc)
    print(f"val: {writer.num_val_tokens():,} tokens, train: {writer.num_train_tokens():,} tokens "
          f"in {len(writer.written) - 1} shard(s); tokenizer in {tokenizer_path}")


if __name__ == "__main__":
    run_main(main)
