"""The sandbox target's tokenizer as files a real engine loads (``tokenizer.json`` +
``tokenizer_config.json`` next to the target's ``config.json``).

The sandbox's own server tokenizes bytes directly (``srt/entrypoints/http_server.py`` ``encode``:
UTF-8 bytes → ids 0..255). vLLM loads a Hugging Face tokenizer from the model directory, so the same
tokenizer is written as a ``tokenizers`` byte-level BPE model with 256 tokens and no merges, whose
token for byte ``b`` has id ``b``: vLLM then encodes a prompt to exactly the ids the sandbox's server
uses, and its greedy output equals transformers' token for token (``shared/notes/vllm-cpu.md``).

``python -m workbench.sandbox.tokenizer [DIR]`` (default: the committed target) rewrites the files;
the committed files are what it writes (``tests/sandbox/test_tokenizer.py`` checks both).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["byte_tokenizer", "write_byte_tokenizer", "TOKENIZER_FILES"]

#: The files written next to the target's config.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def byte_tokenizer():
    """A ``tokenizers.Tokenizer``: byte-level, 256 tokens, id = byte value, no merges, no special
    tokens (the sandbox target has no BOS/EOS: ``bos_token_id``/``eos_token_id`` are null)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins of bytes 0..255
    # the byte -> stand-in mapping of GPT-2's byte-level scheme, which ByteLevel uses
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_to_char = {b: chr(c) for b, c in zip(bs, cs)}
    if set(byte_to_char.values()) != set(alphabet):  # pragma: no cover - tokenizers changed its scheme
        raise RuntimeError("tokenizers' ByteLevel alphabet is not GPT-2's byte-to-unicode map")
    vocab = {byte_to_char[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def write_byte_tokenizer(directory: Path) -> list[Path]:
    """Write :data:`TOKENIZER_FILES` into ``directory`` (which must exist); returns the paths.
    Raises ``FileNotFoundError`` when ``directory`` does not exist."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no model directory {directory}")
    tok_path = directory / "tokenizer.json"
    byte_tokenizer().save(str(tok_path), pretty=True)
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    cfg_path = directory / "tokenizer_config.json"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return [tok_path, cfg_path]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0]) if args else Path(__file__).resolve().parent / "models" / "target"
    for p in write_byte_tokenizer(target):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
