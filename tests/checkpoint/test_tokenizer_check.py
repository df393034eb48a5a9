"""The tokenizer is part of the checkpoint: a stream saved under one tokenizer does not
resume under another (every token id after the restart would mean something else)."""

from __future__ import annotations

import itertools
import random

import pytest

from bagel_data import ResumeError
from bagel_data.checkpoint.tokens import check_tokenizer, tokenizer_fingerprint
from bagel_data.tokenizer import add_special_tokens, load_tokenizer
from helpers.noise_t2i import noise_t2i_packed, write_noise_t2i


def _bpe_tokenizer(folder, vocab_size: int = 700):
    """A byte-level BPE tokenizer of `vocab_size` tokens, trained here on a few sentences."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="[UNK]"))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["[UNK]", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    rng = random.Random(0)  # enough distinct words to fill the vocabulary
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    sentences = [" ".join(words[i : i + 8]) for i in range(0, len(words), 8)]
    hf.train_from_iterator(sentences, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    hf.save(str(folder / "tokenizer.json"))
    tokenizer, ids, _ = add_special_tokens(load_tokenizer(str(folder)))
    return tokenizer, ids


def _first(packed, count: int) -> list:
    return list(itertools.islice(iter(packed), count))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("noise")
    write_noise_t2i(folder)
    return folder


def test_a_state_saved_under_qwen2_is_refused_under_a_small_bpe(data, tmp_path, tokenizer, special_tokens):
    bpe, bpe_special = _bpe_tokenizer(tmp_path / "bpe")
    assert 650 <= len(bpe) <= 720
    saved = noise_t2i_packed(data, tokenizer, special_tokens)
    _first(saved, 2)
    state = saved.state_dict()
    resumed = noise_t2i_packed(data, bpe, bpe_special)
    resumed.load_state_dict(state)
    with pytest.raises(ResumeError) as caught:
        _first(resumed, 1)
    message = str(caught.value)
    assert "151665" in message and str(len(bpe)) in message  # both tokenizers, by size
    assert "same tokenizer" in message  # and the fix


def test_the_same_tokenizer_resumes_and_an_old_state_without_a_fingerprint_loads(data, tokenizer, special_tokens):
    saved = noise_t2i_packed(data, tokenizer, special_tokens)
    stream = iter(saved)
    list(itertools.islice(stream, 2))
    state = saved.state_dict()
    assert state["tokenizer"] == tokenizer_fingerprint(tokenizer, special_tokens)
    expected = list(itertools.islice(stream, 2))
    for checkpoint in (state, {key: value for key, value in state.items() if key != "tokenizer"}):
        resumed = noise_t2i_packed(data, tokenizer, special_tokens)
        resumed.load_state_dict(checkpoint)
        got = _first(resumed, 2)
        assert [batch["sample_lens"] for batch in got] == [batch["sample_lens"] for batch in expected]


def test_the_fingerprint_tells_apart_what_changes_token_ids(tokenizer, special_tokens):
    base = tokenizer_fingerprint(tokenizer, special_tokens)
    assert base == tokenizer_fingerprint(load_tokenizer(), dict(special_tokens))
    moved = dict(special_tokens, eos_token_id=special_tokens["eos_token_id"] + 1)
    assert tokenizer_fingerprint(tokenizer, moved) != base  # a special token's id
    grown = load_tokenizer()
    grown.add_tokens(["<|my_new_token|>"])
    assert tokenizer_fingerprint(grown, special_tokens) != base  # the vocabulary's size
    assert tokenizer_fingerprint(None, special_tokens) is None  # no tokenizer: nothing to check


class _Fake:
    """A tokenizer of the interface the fingerprint reads: a size, an encoding, special
    tokens (a list among them, as `additional_special_tokens` is) and their ids."""

    def __init__(self, ids: dict, size: int = 100, extra: tuple = ("<b>", "<c>")):
        self.ids, self.size = ids, size
        self.special_tokens_map = {"eos_token": "<a>", "additional_special_tokens": list(extra)}

    def __len__(self) -> int:
        return self.size

    def encode(self, text: str) -> list[int]:
        return [ord(c) % self.size for c in text]

    def convert_tokens_to_ids(self, name: str):
        return self.ids.get(name, [0])  # an unknown token: not an int (a list, as some tokenizers answer)


def test_the_fingerprint_holds_every_special_token_that_has_an_id_and_the_packers_apart():
    fingerprint = tokenizer_fingerprint(_Fake({"<a>": 1, "<c>": 3}), {"eos_token_id": 1})
    # <b> has no int id: left out (not None); <c> is in a list of the map; the packer's own
    # ids are kept under their own names, apart from the tokenizer's.
    assert fingerprint["special"] == {"<a>": 1, "<c>": 3, "packer.eos_token_id": 1}


def test_a_resume_compares_the_special_ids_and_names_a_malformed_fingerprint():
    current = tokenizer_fingerprint(_Fake({"<a>": 1}), {"eos_token_id": 1})
    check_tokenizer(None, current)  # an old checkpoint: not checked
    check_tokenizer(dict(current), None)  # no tokenizer now: nothing to compare with
    moved = dict(current, special=dict(current["special"], **{"<a>": 2}))
    with pytest.raises(ResumeError, match="special tokens' ids"):
        check_tokenizer(moved, current)
    for broken in ({"size": 100}, [1, 2]):
        with pytest.raises(ResumeError, match="checkpoint field tokenizer"):
            check_tokenizer(broken, current)


def test_the_message_shows_six_special_tokens_and_counts_the_rest():
    six = {f"<t{i}>": i for i in range(6)}
    fingerprint = tokenizer_fingerprint(_Fake(six, extra=tuple(six)), {})
    assert len(fingerprint["special"]) == 6
    other = dict(fingerprint, size=101)
    with pytest.raises(ResumeError) as caught:
        check_tokenizer(other, fingerprint)
    assert "more" not in str(caught.value)  # six shown, none left to count
    seven = tokenizer_fingerprint(_Fake(six, extra=tuple(six)), {"eos_token_id": 9})
    with pytest.raises(ResumeError, match="and 1 more"):
        check_tokenizer(dict(seven, size=101), seven)
