"""Shared fixtures: the golden cases beside the checkout, and one tokenizer per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from bagel_data.tokenizer import QwenTokenizer

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden"


@pytest.fixture(scope="session")
def golden_root() -> Path:
    if not GOLDEN.is_dir():
        pytest.skip(f"golden cases not found at {GOLDEN}")
    return GOLDEN


@pytest.fixture(scope="session")
def tokenizer() -> QwenTokenizer:
    return QwenTokenizer()


SPECIAL_TOKENS = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}


@pytest.fixture(scope="session")
def special_tokens() -> dict:
    return dict(SPECIAL_TOKENS)
