"""Where the reference scripts find the real tokenizer files, which come from outside the
repository (docs/testing.md, "Test data from outside the repository"): $DETLLM_TOKENIZER_DATA,
else tests/data/external/tokenizers in the source tree -- the same place tests/external_data.h
looks."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZER_DATA = os.environ.get("DETLLM_TOKENIZER_DATA") or os.path.join(
    ROOT, "tests", "data", "external", "tokenizers")


def tokenizer_path(directory, name, file):
    """<directory>/<name>/<file>, or exit with a message naming the missing file."""
    path = os.path.join(directory, name, file)
    if not os.path.isfile(path):
        sys.exit(f"missing {path}: the real tokenizer files come from outside the repository "
                 "(docs/testing.md, \"Test data from outside the repository\"); set DETLLM_TOKENIZER_DATA")
    return path
