"""
dev/data/tinyshakespeare.py: tokenize the "tiny shakespeare" corpus with GPT-2's tokenizer.

    python dev/data/tinyshakespeare.py --input /path/to/tinyshakespeare.txt \
                                       --tiktoken /path/to/gpt2.tiktoken

Without --input the text is downloaded from the char-rnn repository; without --tiktoken (or
$GPT2_TIKTOKEN) GPT-2's vocabulary is downloaded too, so offline both are needed. The text is cut into
documents at blank lines (each speech is one document, keeping its trailing blank line), every
document is preceded by <|endoftext|> (50256), the first 32,768 tokens become the validation split
and the rest the training split. Writes into --output_dir (default data/tinyshakespeare):

    tiny_shakespeare_val.bin     validation tokens
    tiny_shakespeare_train.bin   training tokens
    tokenizer.bin                GPT-2's token bytes, for the trainers' decoder
"""

import argparse
import os

import numpy as np

from data_common import (DataError, Progress, ShardWriter, add_tiktoken_arg, download, encode_document,
                         ensure_dir, gpt2_encoding, run_main, split_documents, write_tokenizer)

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
VAL_TOKENS = 32768


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=None, metavar="PATH",
                        help="local copy of tiny shakespeare (default: download it)")
    add_tiktoken_arg(parser)
    parser.add_argument("--output_dir", default=os.path.join("data", "tinyshakespeare"))
    args = parser.parse_args()

    enc = gpt2_encoding(args.tiktoken)  # fail early, before a download, if there is none
    ensure_dir(args.output_dir)
    input_path = args.input
    if input_path is None:
        input_path = download(URL, os.path.join(args.output_dir, "tiny_shakespeare.txt"))
    if not os.path.isfile(input_path):
        raise DataError(f"--input {input_path}: no such file")
    with open(input_path, "r", encoding="utf-8") as f:
        text = f.read()

    documents = split_documents(text, "blank")
    progress = Progress("tokenizing", total=len(documents), unit="documents")
    parts = []
    for doc in documents:
        parts.append(encode_document(enc, doc))
        progress.update()
    progress.close()
    tokens = np.concatenate(parts)
    if len(tokens) <= VAL_TOKENS:
        raise DataError(f"{input_path}: only {len(tokens)} tokens, need more than {VAL_TOKENS} "
                        f"(the validation split)")
    print(f"{input_path}: {len(text):,} characters, {len(documents):,} documents, {len(tokens):,} tokens")

    writer = ShardWriter(args.output_dir, "tiny_shakespeare", shard_tokens=None,
                         val_tokens=VAL_TOKENS, numbered=False)
    writer.add(tokens)
    writer.close()
    tokenizer_path = os.path.join(args.output_dir, "tokenizer.bin")
    write_tokenizer(tokenizer_path, enc)
    print(f"wrote the {enc.n_vocab}-token tokenizer to {tokenizer_path}")
    print(f"val: {writer.num_val_tokens():,} tokens, train: {writer.num_train_tokens():,} tokens")


if __name__ == "__main__":
    run_main(main)
