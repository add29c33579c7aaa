"""
dev/data/tinystories.py: tokenize the TinyStories corpus (Eldan & Li, 2023) with GPT-2's tokenizer.

    python dev/data/tinystories.py --tiktoken /path/to/gpt2.tiktoken --workers 8

Downloads TinyStories_all_data.tar.gz (about 1.5 GB, 50 JSON files with about 2.7 million short
stories in all) from the Hugging Face hub unless --archive names a local copy. Every story is one
document, preceded by <|endoftext|> (50256). Tokens are cut into shards of --shard_tokens tokens;
the first shard is the validation split. Files, in --output_dir (default data/tinystories):

    tinystories_val_000000.bin, tinystories_train_000001.bin, ..., tokenizer.bin

Train with -i "data/tinystories/tinystories_train_*.bin" -j "data/tinystories/tinystories_val_*.bin".
"""

import argparse
import json
import os
import tarfile

from data_common import (DataError, Progress, ShardWriter, add_tiktoken_arg, download, ensure_dir,
                         gpt2_encoding, run_main, tokenize_documents, write_tokenizer)

URL = "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz"


def iter_stories(archive_path, max_stories=None):
    """The stories of the archive, JSON file by JSON file in name order, without unpacking to disk."""
    count = 0
    try:
        with tarfile.open(archive_path, "r:*") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".json")),
                             key=lambda m: m.name)
            if not members:
                raise DataError(f"{archive_path}: no .json files in the archive")
            for member in members:
                with tar.extractfile(member) as f:
                    try:
                        items = json.load(f)
                    except ValueError as e:
                        raise DataError(f"{archive_path}: {member.name} is not valid JSON: {e}") from None
                for item in items:
                    story = item.get("story") if isinstance(item, dict) else None
                    if not isinstance(story, str):
                        raise DataError(f"{archive_path}: {member.name}: an entry without a \"story\" text")
                    story = story.strip()
                    if story:
                        yield story
                        count += 1
                        if max_stories is not None and count >= max_stories:
                            return
    except (tarfile.TarError, EOFError, OSError) as e:
        raise DataError(f"{archive_path}: cannot read the archive: {e}") from None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", default=None, metavar="PATH",
                        help="local TinyStories_all_data.tar.gz (default: download it into --output_dir)")
    parser.add_argument("--output_dir", default=os.path.join("data", "tinystories"))
    parser.add_argument("--shard_tokens", type=int, default=20_000_000,
                        help="tokens per shard; the first shard is the validation split")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--max_stories", type=int, default=None,
                        help="stop after this many stories (for a quick, partial run)")
    add_tiktoken_arg(parser)
    args = parser.parse_args()
    if args.shard_tokens <= 0 or args.workers <= 0:
        raise DataError("--shard_tokens and --workers must be positive")

    ensure_dir(args.output_dir)
    enc = gpt2_encoding(args.tiktoken)  # fail early, before a long download, if there is none
    archive = args.archive
    if archive is None:
        archive = download(URL, os.path.join(args.output_dir, "TinyStories_all_data.tar.gz"))
    elif not os.path.isfile(archive):
        raise DataError(f"--archive {archive}: no such file")

    writer = ShardWriter(args.output_dir, "tinystories", shard_tokens=args.shard_tokens)
    num_stories = 0
    progress = Progress("tokenizing", total=args.max_stories, unit="stories")  # the archive does not say how many
    for tokens in tokenize_documents(iter_stories(archive, args.max_stories), args.tiktoken,
                                     args.workers, chunksize=64):
        writer.add(tokens)
        num_stories += 1
        progress.update()
    progress.close()
    writer.close()
    if len(writer.written) < 2:
        raise DataError(f"only {writer.num_val_tokens()} tokens: not more than one shard, so no "
                        f"training split (lower --shard_tokens)")
    tokenizer_path = os.path.join(args.output_dir, "tokenizer.bin")
    write_tokenizer(tokenizer_path, enc)
    print(f"{num_stories:,} stories; val: {writer.num_val_tokens():,} tokens, "
          f"train: {writer.num_train_tokens():,} tokens in {len(writer.written) - 1} shard(s); "
          f"tokenizer in {tokenizer_path}")


if __name__ == "__main__":
    run_main(main)
