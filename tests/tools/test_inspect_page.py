"""`bagel-data inspect --html`: one self-contained page of the first packs, opened in a browser.

The browser test needs Debian's `chromium` (`apt-get install -y chromium`); it is skipped,
saying so, where there is none.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import typer
from PIL import Image
from tests.helpers.builders import png_bytes, t2i_run_config
from typer.testing import CliRunner

from bagel_data.cli.tools import inspect_command
from bagel_data.tools.inspect.packs import PLOTS_MISSING, inspect_packs

PURPLE = (120, 20, 200)  # far from every colour of the strip's legend
BROKEN = b"not an image at all"


def _config(folder):
    rows = [
        {"image": png_bytes(64, 64, PURPLE), "captions": {"caption_1": "a purple square <b>bold</b>"}},
        {"image": BROKEN, "captions": {"caption_1": "a broken image"}},
        {"image": png_bytes(48, 32, (250, 250, 250)), "captions": {"caption_1": "a white rectangle"}},
    ]
    return t2i_run_config(folder / "t2i", [[rows]], budget=256)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("inspect")(inspect_command)
    app.command("unused")(lambda: None)  # two commands, so "inspect" is a subcommand as in cli/main.py
    return app


@pytest.fixture
def page(tmp_path):
    report = inspect_packs(_config(tmp_path), tmp_path / "out", num_batches=2, html=tmp_path / "page.html")
    return report, (tmp_path / "page.html").read_text(encoding="utf-8")


def test_the_page_is_self_contained_and_shows_each_sample(page, tmp_path):
    report, text = page
    assert report.html_path == tmp_path / "page.html"
    # Nothing is fetched: every src is a data URI, no link, script or remote address.
    sources = re.findall(r'src="([^"]*)"', text)
    assert sources and all(source.startswith("data:image/png;base64,") for source in sources)
    assert "<script" not in text and "<link" not in text and "http" not in text
    # Each sample: its caption (escaped, not markup), its source file and row, its strip.
    assert "a purple square &lt;b&gt;bold&lt;/b&gt;" in text
    assert re.search(r"part-000\.parquet, row group 0, row 0</code>", text)
    assert re.search(r"part-000\.parquet, row group 0, row 2</code>", text)
    assert text.count('class="strip"') == sum(len(where) for where in report.locations)
    # The mixture against its target and the skipped row with its reason.
    assert "<td>t2i_pretrain</td><td>100.0%</td>" in text
    assert "image_decode" in text and "row group 0, row 1" in text


def test_the_thumbnails_hold_the_images_pixels(page):
    import base64
    import io

    _, text = page
    thumbnails = re.findall(r'<figure><img alt="[^"]*" src="data:image/png;base64,([^"]+)"', text)
    pixels = [np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")) for data in thumbnails]
    assert [p.shape for p in pixels[:2]] == [(64, 64, 3), (32, 48, 3)]  # the rows in order (then again)
    assert np.abs(pixels[0].astype(int) - PURPLE).max() <= 1
    assert np.abs(pixels[1].astype(int) - 250).max() <= 1


def test_the_text_view_names_each_samples_file_and_row(page):
    report, _ = page
    assert all(location is not None for pack in report.locations for location in pack)
    assert re.search(r"sample 0: group t2i_pretrain.*\n    from .*part-000\.parquet, row group 0, row 0", report.text)


def test_the_page_with_step_and_without_matplotlib(tmp_path, monkeypatch):
    # Where matplotlib is absent (`make demo` installs no plotting extra), text and page are
    # still written and the command says how to get the PNGs.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    config = _config(tmp_path)
    config.grouped_datasets["t2i_pretrain"]["weight"] = [[0, 0.0], [10, 1.0]]
    run_file = tmp_path / "run.yaml"
    import yaml

    run_file.write_text(yaml.safe_dump({"grouped_datasets": config.grouped_datasets,
                                        "dataset_info": config.dataset_info, "packing": config.packing}))  # fmt: skip
    html = tmp_path / "p.html"
    args = [
        "inspect",
        str(run_file),
        "--out",
        str(tmp_path / "o"),
        "--batches",
        "1",
        "--num-workers",
        "1",
        "--html",
        str(html),
    ]
    result = CliRunner().invoke(_app(), [*args, "--step", "10"])
    assert result.exit_code == 0, result.output
    assert PLOTS_MISSING in result.output and "ModuleNotFoundError" not in result.output
    assert "at step 10" in html.read_text(encoding="utf-8") and (tmp_path / "o" / "packs.txt").is_file()
    assert not list((tmp_path / "o").glob("*.png"))
    assert f"the packs as a page (open it in a browser): {html}" in result.output


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium to open the page in: apt-get install -y chromium (Debian) runs this test")
    return found


def test_chromium_shows_the_images(page, tmp_path):
    browser = _chromium()
    shot = tmp_path / "shot.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--window-size=1000,900", f"--screenshot={shot}", (tmp_path / "page.html").as_uri()]  # fmt: skip
    subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    purple = np.all(np.abs(pixels - PURPLE) <= 6, axis=-1)
    # The 64 x 64 thumbnail, at the page's scale (1 at the default device scale factor).
    assert purple.sum() >= 0.8 * 64 * 64, f"{purple.sum()} purple pixels on the screenshot"
    rows, cols = np.nonzero(purple)
    assert rows.max() - rows.min() >= 50 and cols.max() - cols.min() >= 50  # one square, not scattered specks
