"""Tests for the offline Qwen2.5 tokenizer and the local HF tokenizer.json adapter."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from bagel_data.tokenizer import (
    QWEN2_SPECIAL_TOKENS,
    HFTokenizerAdapter,
    QwenTokenizer,
    add_special_tokens,
    load_tokenizer,
)

GOLDEN = Path(__file__).resolve().parent / "conformance" / "tokenizer_vectors.json"
QWEN_IDS = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}


def _golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tok() -> QwenTokenizer:
    return QwenTokenizer()


def test_golden_vectors_encode_exactly(tok: QwenTokenizer) -> None:
    golden = _golden()
    assert golden["vectors"]
    mismatches = [(v["text"], v["ids"], tok.encode(v["text"])) for v in golden["vectors"]]
    assert [m for m in mismatches if m[1] != m[2]] == []


def test_golden_special_token_ids() -> None:
    _, ids, n_new = add_special_tokens(QwenTokenizer())
    assert ids == _golden()["special_tokens"] == QWEN_IDS
    assert n_new == 0


@pytest.mark.parametrize(
    "text",
    ["Hello world", "一只猫坐在窗台上。", "🙂👍🏽 emoji", "a<|im_end|>b", "tabs\tand\n\r\n  spaces ", ""],
)
def test_decode_round_trip(tok: QwenTokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_no_bos_eos_and_plain_text(tok: QwenTokenizer) -> None:
    assert tok.encode("") == []
    assert tok.encode("A red square") == [32, 2518, 9334]


def test_special_tokens_inside_text(tok: QwenTokenizer) -> None:
    ids = tok.encode("hi<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|im_end|>")
    assert ids[0] == tok.encode("hi")[0]
    for name in ("<|im_start|>", "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|im_end|>"):
        assert QWEN2_SPECIAL_TOKENS[name] in ids
    assert ids[-1] == 151645
    assert tok.encode("<tool_call></tool_call><|file_sep|>") == [151657, 151658, 151664]
    assert tok.decode([151644]) == "<|im_start|>"
    assert tok.decode(tok.encode("a<|im_end|>b"), skip_special_tokens=True) == "ab"


def test_nfc_normalization(tok: QwenTokenizer) -> None:
    assert tok.encode("e\u0301") == tok.encode("\u00e9")
    assert tok.encode("caf\u0065\u0301 na\u0069\u0308ve") == tok.encode("café naïve")
    # Specials are split off before normalizing, so NFC cannot fuse ">" with U+0338.
    assert tok.encode("<|im_end|>\u0338") == [151645, *tok.encode("\u0338")]


def test_convert_tokens_to_ids(tok: QwenTokenizer) -> None:
    assert tok.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<|vision_start|>"]) == [151645, 151652]
    assert tok.convert_tokens_to_ids("Ġthe") == tok.encode(" the")[0]  # HF byte-level spelling
    assert tok.convert_tokens_to_ids("<|no_such_token|>") is None


def test_every_printable_ascii_character_is_its_own_byte_level_spelling(tok: QwenTokenizer) -> None:
    # GPT-2's byte-level alphabet keeps "!" to "~" as themselves (both ends included).
    for code in range(ord("!"), ord("~") + 1):
        assert tok.convert_tokens_to_ids(chr(code)) == tok.encode(chr(code))[0], chr(code)
    assert tok.convert_tokens_to_ids("Ġ") == tok.encode(" ")[0]  # a space is spelled with a shifted character


def test_sizes_and_special_tokens_map(tok: QwenTokenizer) -> None:
    assert tok.vocab_size == 151643
    assert len(tok) == 151665
    stm = tok.special_tokens_map
    assert stm["eos_token"] == stm["pad_token"] == "<|endoftext|>"
    assert {"<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"} <= set(stm["additional_special_tokens"])


def test_add_tokens() -> None:
    tok = QwenTokenizer()
    assert tok.add_tokens(["<|im_start|>", "the"]) == 0  # special and regular vocab entries
    assert tok.add_tokens(["<|my_token|>", "<|my_token|>", "<|other|>"]) == 2
    assert tok.convert_tokens_to_ids(["<|my_token|>", "<|other|>"]) == [151665, 151666]
    assert len(tok) == 151667
    assert tok.add_tokens(["<|my_token|>"]) == 0
    ids = tok.encode("x<|my_token|>y")
    assert 151665 in ids
    assert tok.decode(ids) == "x<|my_token|>y"


def test_pickle_round_trip() -> None:
    tok = QwenTokenizer()
    tok.add_tokens(["<|extra|>"])
    blob = pickle.dumps(tok)
    assert len(blob) < 1000  # carries the added-token table, not the encoder
    clone = pickle.loads(blob)
    text = "Hello <|extra|> world<|im_end|> café"
    assert clone.encode(text) == tok.encode(text)
    assert len(clone) == len(tok)


def test_load_tokenizer_names(tmp_path: Path) -> None:
    for name in (None, "qwen2", "qwen2.5"):
        assert isinstance(load_tokenizer(name), QwenTokenizer)
    with pytest.raises(ValueError, match="bert-base"):
        load_tokenizer("bert-base")
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_tokenizer(str(tmp_path))  # folder without tokenizer.json


# --- HF adapter on a tiny tokenizer built here -------------------------------------------------


def _build_hf_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    hf = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "<|endoftext|>"])
    sentences = ["a red square on a blue background", "make the sky pink", "a cat on a mat"]
    hf.train_from_iterator(sentences, trainer=trainer)
    hf.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    # A post-processor that would wrap every sequence, so we can see the adapter skip it.
    hf.post_processor = processors.TemplateProcessing(
        single="<|im_start|> $A <|im_end|>",
        special_tokens=[(t, hf.token_to_id(t)) for t in ("<|im_start|>", "<|im_end|>")],
    )
    folder.mkdir(parents=True, exist_ok=True)
    hf.save(str(folder / "tokenizer.json"))


def test_hf_adapter_derived_special_map(tmp_path: Path) -> None:
    _build_hf_tokenizer(tmp_path)
    tok = load_tokenizer(str(tmp_path))
    assert isinstance(tok, HFTokenizerAdapter)
    assert set(tok.special_tokens_map["additional_special_tokens"]) >= {"<|im_start|>", "<|im_end|>"}
    ids = tok.encode("a red cat")
    assert ids == tok.convert_tokens_to_ids(["a", "red", "cat"])
    assert tok.convert_tokens_to_ids("<|im_start|>") not in ids
    assert tok.decode(ids) == "a red cat"

    size = len(tok)
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    _, new_ids, n_new = add_special_tokens(tok)
    assert n_new == 2
    assert new_ids == dict(bos_token_id=im_start, eos_token_id=im_end, start_of_image=size, end_of_image=size + 1)
    assert len(tok) == size + 2
    sky = tok.convert_tokens_to_ids("sky")
    assert tok.encode("<|vision_start|> sky <|vision_end|>") == [size, sky, size + 1]
    assert add_special_tokens(tok)[2] == 0  # idempotent: now all four exist

    clone = pickle.loads(pickle.dumps(tok))
    assert clone.encode("<|vision_start|> a mat") == tok.encode("<|vision_start|> a mat")
    assert len(clone) == len(tok)


def test_hf_adapter_reads_config_files(tmp_path: Path) -> None:
    _build_hf_tokenizer(tmp_path)
    config = {
        "eos_token": {"content": "<|endoftext|>", "special": True},
        "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "model_max_length": 512,
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tok = load_tokenizer(tmp_path)
    assert tok.special_tokens_map == {
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
    }
    assert tok.add_tokens(["red", "zebra", "zebra"]) == 1
    assert tok.convert_tokens_to_ids("zebra") == len(tok) - 1
