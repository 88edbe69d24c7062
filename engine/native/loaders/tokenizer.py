"""The tokenizer that goes with a native model path: an M3 checkpoint's tokenizer.json, any
other tokenizer.json, or the vocabulary inside a GGUF file (through transformers)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..core.detokenizer import TokenizerLike

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class _TokenizersAdapter:
    def __init__(self, tok: Tokenizer) -> None:
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=False)


class _HFAdapter:
    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        # a transformers tokenizer (held as Any): its decode returns the text
        return cast(str, self._tok.decode(list(token_ids), skip_special_tokens=False))


def load_tokenizer(path: str | Path) -> TokenizerLike:
    p = Path(path)
    gguf = p if p.suffix == ".gguf" else None
    if gguf is None and p.is_dir() and not (p / "tokenizer.json").is_file():
        gguf = next(iter(sorted(p.glob("*.gguf"))), None)
    if gguf is not None:
        try:
            from transformers import AutoTokenizer

            return _HFAdapter(AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name))
        except Exception as e:  # transformers raises many types on a bad vocabulary
            raise ValueError(f"cannot read the tokenizer inside {gguf}: {e}") from None
    if not (p / "tokenizer.json").is_file():
        raise ValueError(f"no tokenizer.json in {p}")
    from ...m3.tokenizer import M3Tokenizer

    try:
        return M3Tokenizer.from_model_dir(p)
    except ValueError:  # not an M3 vocabulary (no M3 end-of-turn token): plain tokenizers
        from tokenizers import Tokenizer

        try:
            return _TokenizersAdapter(Tokenizer.from_file(str(p / "tokenizer.json")))
        except Exception as e:  # tokenizers raises a bare Exception on a malformed file
            raise ValueError(f"cannot read {p / 'tokenizer.json'}: {e}") from None
