"""The embedding model's tokenizer as the chunker needs it: counts, ids and character offsets of a
whole document, without special tokens and without the model's length limit."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Protocol


class TextTokenizer(Protocol):
    def ids(self, text: str) -> list[int]: ...
    def offsets(self, text: str) -> list[tuple[int, int]] | None: ...


class FastTokenizer:
    """A ``tokenizers.Tokenizer`` (tokenizer.json): the same ids as the transformers fast tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = copy.deepcopy(tokenizer)
        self._tok.no_truncation()
        self._tok.no_padding()

    @classmethod
    def from_file(cls, path: str | Path) -> FastTokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def offsets(self, text: str) -> list[tuple[int, int]] | None:
        return [tuple(o) for o in self._tok.encode(text, add_special_tokens=False).offsets]


class HFTokenizer:
    """A transformers tokenizer (slow or fast), copied without its length limit so whole documents
    neither truncate nor warn "sequence length is longer than the specified maximum"."""

    def __init__(self, tokenizer: Any) -> None:
        try:
            self._tok = copy.deepcopy(tokenizer)
            self._tok.model_max_length = 10**9
        except Exception:
            self._tok = tokenizer

    def ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False)

    def offsets(self, text: str) -> list[tuple[int, int]] | None:
        try:
            enc = self._tok(text, add_special_tokens=False, return_offsets_mapping=True)
            return [tuple(o) for o in enc["offset_mapping"]]
        except Exception:  # slow tokenizers have no offsets
            return None
