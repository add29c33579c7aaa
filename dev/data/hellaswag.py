"""
dev/data/hellaswag.py: HellaSwag's validation set as a multiple-choice eval file for the trainers' -H.

    python dev/data/hellaswag.py --tiktoken ../shared/data/gpt2.tiktoken
    python dev/data/hellaswag.py --input /path/to/hellaswag_val.jsonl --tiktoken /path/to/gpt2.tiktoken
    ./train_gpt2 ... -H data/hellaswag/hellaswag_val.bin

Without --input the validation split (10,042 examples, one JSON object a line) is downloaded from
the HellaSwag repository; offline, pass a local copy. Each example becomes a context (its "ctx"
field) and four completions (its "endings", each after a space, as GPT-2's tokenizer joins words),
tokenized with GPT-2's tokenizer; "label" is the right one. The trainers score a completion by the
mean loss of its tokens after the context and count an example right when the right completion
scores lowest (common/eval.h); llm.c's dev/data/hellaswag.py calls that number acc_norm. Writes
--output (default data/hellaswag/hellaswag_val.bin) in llm.c's eval format (doc/formats.md).
"""

import argparse
import json
import os

from data_common import (DataError, Progress, add_tiktoken_arg, download, ensure_dir, gpt2_encoding, run_main,
                         write_evalfile)

URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"


def read_examples(path):
    """The (context, endings, label) of every line of a HellaSwag .jsonl file."""
    examples = []
    with open(path, "r", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                ctx, endings, label = item["ctx"], item["endings"], int(item["label"])
            except (ValueError, KeyError, TypeError) as e:
                raise DataError(f"{path}, line {number}: not a HellaSwag example ({e})") from None
            if not isinstance(endings, list) or not 0 <= label < len(endings):
                raise DataError(f"{path}, line {number}: label {label} of {len(endings)} endings")
            examples.append((ctx, endings, label))
    if not examples:
        raise DataError(f"{path}: no examples")
    return examples


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].strip(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=None, metavar="PATH",
                        help="local copy of hellaswag_val.jsonl (default: download it)")
    add_tiktoken_arg(parser)
    parser.add_argument("--output", default=os.path.join("data", "hellaswag", "hellaswag_val.bin"))
    args = parser.parse_args()

    enc = gpt2_encoding(args.tiktoken)  # fail early, before a download, if there is none
    ensure_dir(os.path.dirname(args.output) or ".")
    input_path = args.input
    if input_path is None:
        input_path = download(URL, os.path.join(os.path.dirname(args.output) or ".", "hellaswag_val.jsonl"))
    if not os.path.isfile(input_path):
        raise DataError(f"--input {input_path}: no such file")
    examples = read_examples(input_path)
    progress = Progress("tokenizing", total=len(examples), unit="examples")
    rendered = []
    longest = 0
    for ctx, endings, label in examples:
        context = enc.encode_ordinary(ctx)
        completions = [enc.encode_ordinary(" " + ending) for ending in endings]
        if not context or not all(completions):
            raise DataError(f"{input_path}: example {len(rendered)} has an empty context or ending")
        longest = max(longest, len(context) + max(len(c) for c in completions))
        rendered.append((context, completions, label))
        progress.update()
    progress.close()
    write_evalfile(args.output, rendered)
    print(f"wrote {len(rendered):,} examples to {args.output}; the longest context + completion has {longest} "
          f"tokens (the trainers need -t >= {longest})")


if __name__ == "__main__":
    run_main(main)
