"""
dev/experiments/seeded.py: what a "seed" means in the experiments, while the trainers take no seed
flag (common/args.h has a seed field, fixed at 1337, but no flag for it).

    python dev/experiments/seeded.py init  --depth d6 --mode siamese --seed 2 --vocab_from DIR -o init.bin
        a fresh model written by the PyTorch reference (dev/train_gpt2.py) with torch.manual_seed(seed):
        the same initialisation recipe as the trainers' fresh dN (GPT-2's), other random numbers.
        The trainers start from it with -e init.bin. The vocabulary is that of DIR/tokenizer.bin
        (257 for the arithmetic data), else GPT-2's 50257, as the trainers choose for a fresh model.
    python dev/experiments/seeded.py data --seed 2 SRC_DIR DST_DIR
        a copy of a prepared data folder whose training shards (*train*.bin) are rotated by an
        offset that depends on the seed, so that each seed sees the batches in another order. The
        other files (validation shards, tokenizer.bin, the arithmetic marker) are copied as they are.
"""

import argparse
import glob
import os
import shutil
import struct
import sys

HEADER_INTS = 256
SHARD_MAGIC = 20240520
TOKENIZER_MAGIC = 20240328


def vocab_size_of(data_dir):
    """The vocabulary of DIR/tokenizer.bin, or GPT-2's when there is none."""
    path = os.path.join(data_dir, "tokenizer.bin") if data_dir else ""
    if not path or not os.path.exists(path):
        return 50257
    with open(path, "rb") as f:
        header = struct.unpack("<3i", f.read(12))
    if header[0] != TOKENIZER_MAGIC:
        sys.exit(f"error: {path}: not a tokenizer file")
    return header[2]


def cmd_init(args):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import torch
    from train_gpt2 import GPT, GPTConfig, write_model
    if not (args.depth.startswith("d") and args.depth[1:].isdigit()):
        sys.exit(f"error: --depth expects dN, got {args.depth}")
    torch.manual_seed(args.seed)
    config = GPTConfig.from_depth(int(args.depth[1:]), args.mode, vocab_size=vocab_size_of(args.vocab_from))
    write_model(GPT(config), args.output)
    print(f"wrote {args.output}: {args.depth} {args.mode} V={config.vocab_size} seed {args.seed}")


def rotate_shard(src, dst, seed):
    with open(src, "rb") as f:
        header = f.read(4 * HEADER_INTS)
        tokens = f.read()
    magic, _, n = struct.unpack("<3i", header[:12])
    if magic != SHARD_MAGIC or len(tokens) != 2 * n:
        sys.exit(f"error: {src}: not a token shard")
    # a different, seed-dependent start for each seed; seed 0 keeps the original order
    offset = (seed * 7919 * 1031) % n if n else 0
    with open(dst, "wb") as f:
        f.write(header)
        f.write(tokens[2 * offset:])
        f.write(tokens[:2 * offset])
    return offset


def cmd_data(args):
    os.makedirs(args.dst, exist_ok=True)
    marker = None
    for src in sorted(glob.glob(os.path.join(args.src, "*"))):
        name = os.path.basename(src)
        dst = os.path.join(args.dst, name)
        if name == "arithmetic.txt":
            marker = (src, dst)  # copied last: the trainers take a folder with it as complete
        elif "train" in name and name.endswith(".bin"):
            offset = rotate_shard(src, dst, args.seed)
            print(f"{dst}: rotated by {offset} tokens (seed {args.seed})")
        elif os.path.isfile(src):
            shutil.copyfile(src, dst)
    if marker:
        shutil.copyfile(*marker)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pi = sub.add_parser("init")
    pi.add_argument("--depth", required=True)
    pi.add_argument("--mode", required=True, choices=["pre", "post", "siamese"])
    pi.add_argument("--seed", type=int, required=True)
    pi.add_argument("--vocab_from", default="", help="data folder whose tokenizer.bin sets the vocabulary")
    pi.add_argument("-o", dest="output", required=True)
    pd = sub.add_parser("data")
    pd.add_argument("--seed", type=int, required=True)
    pd.add_argument("src")
    pd.add_argument("dst")
    args = p.parse_args()
    cmd_init(args) if args.cmd == "init" else cmd_data(args)


if __name__ == "__main__":
    main()
