"""Config files as untrusted input (issue 27): a key or group given twice is an error, not
last-one-wins; aliases are expanded under a size bound (a 342-byte alias bomb fails at once);
weights must sum to a finite number; a message shows a value's first 200 characters, never
its whole repr(); a dataset_info key the family does not read is an error."""

from __future__ import annotations

import copy
import textwrap

import pytest

from bagel_data.config import parse_groups
from bagel_data.errors import ConfigError
from bagel_data.schema.files import read_structured

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi")
)


def _write(tmp_path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("packing:\n  max_num_tokens: 100\n  max_num_tokens: 9000\n", 3),
        ("t2i_pretrain:\n  weight: 1\nvlm_sft:\n  weight: 1\nt2i_pretrain:\n  weight: 5\n", 5),
    ],
)
def test_a_key_given_twice_is_an_error_naming_its_lines(tmp_path, text, line):
    with pytest.raises(ConfigError, match=rf"line {line}, column .*duplicate key"):
        read_structured(_write(tmp_path, text), "config")


def test_merge_keys_still_override(tmp_path):
    text = "base: &base {a: 1, b: 2}\nchild:\n  <<: *base\n  b: 3\n"
    assert read_structured(_write(tmp_path, text), "config")["child"] == {"a": 1, "b": 3}


def test_an_alias_bomb_fails_fast(tmp_path):
    path = _write(tmp_path, BOMB)
    assert len(BOMB) < 630
    with pytest.raises(ConfigError, match="aliases expand to more than") as error:
        read_structured(path, "config")
    assert len(str(error.value)) < 400


def test_a_recursive_alias_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="contains it"):
        read_structured(_write(tmp_path, "a: &a [1, *a]\n"), "config")


def test_a_huge_value_is_shown_by_its_first_200_characters():
    nested = ["lol"] * 9
    for _ in range(8):
        nested = [nested] * 9
    message = str(ConfigError("key", nested, "fix it"))
    assert len(message) < 300 and message.startswith("key = [[[")
    assert len(str(ConfigError("key", "x" * 10_000, "fix it"))) < 300


def test_weights_must_sum_to_a_finite_number(grouped, info):
    for name, weight in zip(grouped, [1e308, 1e308, 1e308]):
        grouped[name]["weight"] = weight
    with pytest.raises(ConfigError, match="finite"):
        parse_groups(grouped, info, None)


@pytest.mark.parametrize("key", ["jsonl_path", "parquet_info_path"])
def test_a_dataset_info_key_the_family_does_not_read_is_an_error(grouped, info, key, tmp_path):
    group = next(name for name in grouped if name.startswith("t2i"))
    info = copy.deepcopy(info)
    dataset = grouped[group]["dataset_names"][0]
    info[group][dataset][key] = str(_write(tmp_path, "{}", "x.json"))
    with pytest.raises(ConfigError, match=rf"dataset_info.{group}.{dataset} = \['{key}'\]: .*does not read"):
        parse_groups(grouped, info, None)


def test_expanded_size_counts_every_container_and_value_once_per_use():
    from bagel_data.schema.files import expanded_size

    assert expanded_size(7) == 1
    assert expanded_size([[1, 2], [3]]) == 6  # the outer list, two lists, three values
    assert expanded_size({"a": [1, 2]}) == 5  # the dict, its key, the list, two values
    shared = [1, 2]
    assert expanded_size([shared, shared]) == 7  # an alias counts at each use
