"""The tables users bring from the Hub, written by `datasets` itself (tests/data/hub/, made by
scripts/write_hub_fixtures.py): each trains in place or through `prepare t2i`, or is refused
at construction with one error naming what it is and the exact fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bagel_data.cli.main import app
from bagel_data.errors import ConfigError
from bagel_data.families.t2i import T2IIterableDataset
from bagel_data.media.images import ImageTransform
from bagel_data.tools.prepare.sharded import prepare_sharded

HUB = Path(__file__).parents[1] / "data" / "hub"
TRANSFORM = ImageTransform(32, 16, 16)
CLASSES = ["tench", "goldfish", "great white shark", "tiger shark"]
TEXTS = [f"a {name} on a plain background" for name in CLASSES]
runner = CliRunner()


def _copy(name: str, tmp_path: Path) -> Path:
    """The fixture `name` alone in a folder of its own (a data_dir)."""
    folder = tmp_path / "data"
    folder.mkdir()
    source = HUB / name
    if source.is_dir():
        shutil.copytree(source, folder / name)
        return folder / name
    shutil.copy2(source, folder / name)
    return folder


def _family(folder: Path, tokenizer, **columns) -> T2IIterableDataset:
    return T2IIterableDataset("t2i", TRANSFORM, tokenizer, [str(folder)], [1], num_workers=1, **columns)


def _captions(out: Path) -> list[dict]:
    return [json.loads(cell) for cell in pq.read_table(out).column("captions").to_pylist()]


def test_a_save_to_disk_folder_prepares(tmp_path):
    folder = _copy("save_to_disk", tmp_path)
    report = prepare_sharded("t2i", folder, tmp_path / "out")
    assert report.rows_written == 4
    assert [list(c.values()) for c in _captions(tmp_path / "out")] == [[text] for text in TEXTS]


def test_a_save_to_disk_folder_in_place_names_prepare(tmp_path, tokenizer):
    folder = _copy("save_to_disk", tmp_path)
    with pytest.raises(ConfigError) as caught:
        _family(folder, tokenizer)
    message = str(caught.value)
    assert "save_to_disk folder" in message and f"bagel-data prepare t2i {folder} OUT_DIR" in message


def test_several_caption_columns_become_one_samples_choices(tmp_path, tokenizer):
    folder = _copy("two_captions.parquet", tmp_path)
    dataset = _family(folder, tokenizer, image_column="image", caption_column=["short", "long"])
    seen: dict[int, set[str]] = {}
    for cursor, sample in dataset.iter_samples():
        if cursor[0] >= 12:  # twelve passes: each row draws one of its two captions each time
            break
        seen.setdefault(cursor[-1], set()).add(tokenizer.decode(sample["text_ids_list"][0]))
    assert seen == {row: {CLASSES[row], TEXTS[row]} for row in range(4)}


def test_several_caption_columns_in_prepare_and_a_repeated_cli_option(tmp_path):
    folder = _copy("two_captions.parquet", tmp_path)
    args = [
        "prepare",
        "t2i",
        str(folder),
        str(tmp_path / "out"),
        "--caption-column",
        "short",
        "--caption-column",
        "long",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert [list(c.values()) for c in _captions(tmp_path / "out")] == [[c, t] for c, t in zip(CLASSES, TEXTS)]


def test_a_hub_table_without_bagels_columns_names_the_keys(tmp_path, tokenizer):
    folder = _copy("image_text.parquet", tmp_path)
    with pytest.raises(ConfigError) as caught:
        _family(folder, tokenizer)
    assert "`image_column: image` and `caption_column: text`" in str(caught.value)
    # With them named, it reads.
    assert len(list(zip(range(4), _family(folder, tokenizer, image_column="image", caption_column="text")))) == 4


def test_a_table_of_other_names_is_named_in_each_interfaces_words(tmp_path, tokenizer):
    folder = _copy("unnamed.parquet", tmp_path)
    with pytest.raises(ConfigError) as caught:
        _family(folder, tokenizer)
    assert "`image_column: picture` and `caption_column: words`" in str(caught.value)
    result = runner.invoke(app, ["prepare", "t2i", str(folder), str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "`--image-column picture` and `--caption-column words`" in result.output
    assert "image_column" not in result.output and "caption_column" not in result.output


def test_a_column_of_urls_gives_the_img2dataset_command(tmp_path, tokenizer):
    folder = _copy("urls.parquet", tmp_path)
    command = (
        f"img2dataset --url_list {folder / 'urls.parquet'} --input_format parquet --url_col url --caption_col caption"
    )
    with pytest.raises(ConfigError) as caught:
        _family(folder, tokenizer)
    assert "holds image URLs (https://example.com/images/00000.jpg)" in str(caught.value)
    assert command in str(caught.value)
    with pytest.raises(ConfigError, match="holds image URLs"):  # named as the image column: no path reads
        _family(folder, tokenizer, image_column="url", caption_column="caption")
    for extra in ([], ["--image-column", "url"]):  # found by its cells, or named
        result = runner.invoke(app, ["prepare", "t2i", str(folder), str(tmp_path / "out"), *extra])
        assert result.exit_code == 2 and "holds image URLs" in result.output, result.output
        assert command in result.output.replace("\n", "")
        assert "--image-root" not in result.output


@pytest.mark.parametrize("tar", ["classes_png.tar", "classes_jpg.tar"])
def test_class_label_tars_take_their_captions_from_class_names(tar, tmp_path, tokenizer):
    folder = _copy(tar, tmp_path)
    by_file = _family(folder, tokenizer, class_names=str(HUB / "class_names.txt"))
    by_list = _family(folder, tokenizer, class_names=CLASSES)
    for dataset in (by_file, by_list):
        samples = [sample for _, (_, sample) in zip(range(4), dataset.iter_samples())]
        assert [tokenizer.decode(s["text_ids_list"][0]) for s in samples] == CLASSES
    # Without the names, each labelled-only sample is a named skip that says what to give.
    bare = _family(folder, tokenizer)
    bare.max_consecutive_failures = 10
    with pytest.raises(Exception, match="class_names"):
        next(iter(bare.iter_samples()))


def test_prepare_edit_names_its_columns_and_the_later_turns_of_magicbrush(tmp_path):
    folder = _copy("magicbrush.parquet", tmp_path)
    result = runner.invoke(app, ["prepare", "edit", str(folder), str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.replace("│", " ").split())
    assert "edit steps from columns: source 'source_img', instruction 'instruction', target 'target_img' 2" in output
    assert "later turns of multi-turn edits (turn_index > 1, as MagicBrush's)" in output
    assert "1 row(s) are later turns of multi-turn edits" in output and '"images": [turn 1 source' in output


def test_prepare_captions_class_label_tars_from_class_names(tmp_path):
    tar = HUB / "classes_jpg.tar"
    names = str(HUB / "class_names.txt")
    result = runner.invoke(app, ["prepare", "t2i", str(tar), str(tmp_path / "out"), "--class-names", names])
    assert result.exit_code == 0, result.output
    assert [list(c.values()) for c in _captions(tmp_path / "out")] == [[name] for name in CLASSES]
    bare = runner.invoke(app, ["prepare", "t2i", str(tar), str(tmp_path / "bare")])
    assert bare.exit_code == 1 and "pass --class-names FILE" in " ".join(bare.output.split())
