"""M3's tokenizer: a thin wrapper over a Hugging Face `tokenizers.Tokenizer`.

`M3Tokenizer.from_model_dir` loads a checkpoint's tokenizer.json (+ tokenizer_config.json);
`M3Tokenizer.default()` loads the small bundled byte-level BPE with M3's added tokens
(built by `python -m m3agent.engine.m3.build_tokenizer`). Streaming detokenisation is the
native engine's (engine/native/core/detokenizer.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from . import tokens as T
from .prompt_parts import PromptPart

_DATA = Path(__file__).parent / "data"


def default_tokenizer_path() -> Path:
    return _DATA / "tokenizer.json"


def _token_text(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    content = v.get("content") if isinstance(v, dict) else None
    return content if isinstance(content, str) else None


class M3Tokenizer:
    def __init__(self, tokenizer: Tokenizer, config: dict[str, Any] | None = None):
        self._tok = tokenizer
        self._plain: Tokenizer | None = None  # every added token as text (encode_text)
        self._model: Tokenizer | None = None  # special tokens as text (encode_model)
        self.config = dict(config or {})
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        eos = _token_text(self.config.get("eos_token")) or T.EOS
        eos_id = tokenizer.token_to_id(eos)
        if eos_id is None:
            raise ValueError(f"the tokenizer has no end-of-turn token {eos!r}")
        self.eos_token_id: int = eos_id
        self.bos_token_id = tokenizer.token_to_id(T.BOS)
        self.role_token_id = tokenizer.token_to_id(T.ROLE)
        self.image_token_id = tokenizer.token_to_id(T.IMAGE)
        self.video_token_id = tokenizer.token_to_id(T.VIDEO)
        self.image_start_token_id = tokenizer.token_to_id(T.IMAGE_START)
        self.image_end_token_id = tokenizer.token_to_id(T.IMAGE_END)
        self.ns_token_id = tokenizer.token_to_id(T.NS)
        self.think_start_token_id = tokenizer.token_to_id(T.THINK_START)
        self.think_end_token_id = tokenizer.token_to_id(T.THINK_END)
        added = tokenizer.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self.added_tokens: dict[str, int] = {t.content: i for i, t in added.items()}
        # If a checkpoint flags the think markers special, decoding must keep special tokens
        # or the reasoning parser never sees them (SPEC §4.6).
        self.think_markers_special = any(
            i in self.special_token_ids
            for i in (self.think_start_token_id, self.think_end_token_id)
            if i is not None
        )

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_file(
        cls, tokenizer_json: str | Path, config: dict[str, Any] | None = None
    ) -> M3Tokenizer:
        p = Path(tokenizer_json)
        if not p.is_file():
            raise ValueError(f"tokenizer file not found: {p}")
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as e:  # tokenizers raises a bare Exception on malformed files
            raise ValueError(f"cannot load tokenizer {p}: {str(e).splitlines()[0]}") from None
        return cls(tok, config)

    @classmethod
    def from_model_dir(cls, path: str | Path) -> M3Tokenizer:
        d = Path(path)
        if not (d / "tokenizer.json").is_file():
            raise ValueError(f"no tokenizer.json in {d}")
        config: dict[str, Any] = {}
        cfg = d / "tokenizer_config.json"
        if cfg.is_file():
            try:
                config = json.loads(cfg.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ValueError(f"{cfg} is not valid JSON: {e}") from None
            if not isinstance(config, dict):
                raise ValueError(f"{cfg} must hold a JSON object")
        return cls.from_file(d / "tokenizer.json", config)

    @classmethod
    def default(cls) -> M3Tokenizer:
        return cls.from_file(default_tokenizer_path(), {"eos_token": T.EOS, "bos_token": T.BOS})

    # ---- use ----------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; marker strings in it become their added tokens; no BOS added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_text(self, text: str) -> list[int]:
        """Token ids of outside text: every added-token string in it stays plain text (bytes),
        the non-special ones too (`]<]minimax[>[`, `<mm:think>`): the tokenizers library's
        `encode_special_tokens` leaves those matched, so the copy flags every added token
        special first. Ordinary text encodes exactly as `encode` does."""
        return self._plain_copy().encode(text, add_special_tokens=False).ids

    def encode_model(self, text: str) -> list[int]:
        """Ids of the model's own earlier output: its tool-call and think markers are tokens,
        role / end-of-turn / media strings stay text."""
        if self._model is None:
            self._model = Tokenizer.from_str(self._tok.to_str())
            self._model.encode_special_tokens = True
        return self._model.encode(text, add_special_tokens=False).ids

    def _plain_copy(self) -> Tokenizer:
        if self._plain is None:
            data = json.loads(self._tok.to_str())
            for t in data.get("added_tokens") or ():
                t["special"] = True
            self._plain = Tokenizer.from_str(json.dumps(data))
            self._plain.encode_special_tokens = True
        return self._plain

    def encode_text_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode_text` of many texts at once (the Rust side spreads them over threads)."""
        plain = self._plain_copy()
        return [e.ids for e in plain.encode_batch(list(texts), add_special_tokens=False)]

    def encode_parts(self, parts: Sequence[PromptPart]) -> list[int]:
        """Ids of a prompt given as runs (`chat_template.PromptPart`: .text, .kind).

        "template" runs are encoded with their markers as tokens, "text" runs with
        `encode_text`, "model" runs with `encode_model`. Each run is encoded on its own, so a
        prompt that extends an earlier one run for run extends its ids too, whatever BPE would
        merge across run ends.
        """
        ids: list[int] = []
        for p in parts:
            if p.kind == "template":
                ids += self.encode(p.text)
            elif p.kind == "model":
                ids += self.encode_model(p.text)
            else:
                ids += self.encode_text(p.text)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    @property
    def hf_tokenizer(self) -> Tokenizer:
        return self._tok


def write_tokenizer_files(model_dir: str | Path) -> Path:
    """Copy the bundled tokenizer into a checkpoint directory, with a tokenizer_config.json.

    For `m3agent model init-tiny`; returns the tokenizer.json written there.
    """
    from .build_tokenizer import tokenizer_config

    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    target = d / "tokenizer.json"
    shutil.copyfile(default_tokenizer_path(), target)
    cfg = tokenizer_config(Tokenizer.from_file(str(target)))
    (d / "tokenizer_config.json").write_text(
        json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return target
