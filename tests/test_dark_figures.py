"""Dark renderings of the figures (book/_ext/attnbook_site.py): what each colour becomes.

The site shows a figure's dark rendering when the theme is dark. The map must keep what the
prose says of a figure true: a colour scale keeps its colours (viridis is dark to bright in
both), the Okabe-Ito line colours stay as they are, numbers printed on heatmap cells keep
their contrast, and only the paper and the neutral ink change.
"""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from PIL import Image

from attnbook.plots import OKABE_ITO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
site = importlib.import_module("attnbook_site")


def _hex(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def test_paper_and_neutral_ink_swap_and_colours_stay():
    white, black, grey = (255, 255, 255), (0, 0, 0), (128, 128, 128)
    out = site.dark_colours(np.array([white, black, grey]))
    assert tuple(out[0]) == site.DARK_PAPER and tuple(out[1]) == site.DARK_INK
    paper, ink = np.array(site.DARK_PAPER), np.array(site.DARK_INK)
    assert np.all(paper < out[2]) and np.all(out[2] < ink)  # grey stays between the two
    coloured = np.array([_hex(c) for c in OKABE_ITO if c != "#000000"])
    assert np.array_equal(site.dark_colours(coloured), coloured)
    viridis = np.rint(255 * plt.get_cmap("viridis")(np.linspace(0, 1, 256))[:, :3])
    assert np.array_equal(site.dark_colours(viridis), viridis.astype(np.uint8))


def test_a_faint_coloured_line_sits_on_the_dark_paper_without_a_halo():
    blue = np.array(_hex(OKABE_ITO[0]), dtype=float)
    for opacity in (0.05, 0.1, 0.2, 0.25):  # faded lines, faint edges
        on_white = opacity * blue + (1 - opacity) * 255  # an anti-aliased edge, a faded line
        expected = opacity * blue + (1 - opacity) * np.array(site.DARK_PAPER)
        got = site.dark_colours(on_white[None])[0]
        assert np.abs(got - expected).max() <= 3, (opacity, got, expected)
    half = 0.5 * blue + 0.5 * 255  # half covered: keeps its light tint (colours stay exact)
    assert np.array_equal(site.dark_colours(half[None])[0], np.rint(half))


def _heatmap_png() -> Image.Image:
    fig, ax = plt.subplots(figsize=(3, 3), dpi=200)
    values = np.arange(16).reshape(4, 4) / 15
    ax.imshow(values, cmap="viridis")
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.5 else "k")
    ax.set_title("a title in black")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor="white")
    plt.close(fig)
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


def test_numbers_on_heatmap_cells_keep_their_contrast():
    light = _heatmap_png()
    dark = np.asarray(site.dark_image(light))
    rgb = np.asarray(light)
    ground = site.coloured_ground(rgb)
    neutral = (rgb.max(-1).astype(int) - rgb.min(-1)) < 8
    on_cells = ground & neutral & (rgb.min(-1) > 200)  # white digits inside the heatmap
    outside = ~ground & neutral & (rgb.min(-1) > 250)  # the figure's white paper
    assert on_cells.sum() > 200 and outside.sum() > 10_000
    assert dark[on_cells].min() > 200  # white digits stay white on their cells
    assert np.abs(dark[outside].astype(int) - site.DARK_PAPER).max() <= 3  # paper turns dark
    black_text = ~ground & (rgb.max(-1) < 40)  # the title
    assert black_text.sum() > 50 and np.all(dark[black_text] > 150)  # light ink


def test_each_figure_gets_one_dark_source(tmp_path):
    images = tmp_path / "_images"
    images.mkdir()
    _heatmap_png().save(images / "abc.png")
    page = tmp_path / "notebooks" / "ch.html"
    page.parent.mkdir()
    page.write_text(
        '<p><img alt="A heatmap." src="../_images/abc.png" style="width: 300px;" />'
        '<img alt="logo" src="../_static/logo.png" /></p>'
    )
    assert site._dark_figures(tmp_path) == 1
    html = page.read_text()
    assert html.count("<picture>") == 1 and html.count('class="attnbook-dark"') == 1
    assert (
        '<picture><source class="attnbook-dark" srcset="../_images/abc.dark.png" '
        f'media="{site.DARK_MEDIA}" /><img alt="A heatmap." src="../_images/abc.png"'
    ) in html
    assert html.count("logo.png") == 1 and html.count("<img") == 2  # one img per figure
    assert (images / "abc.dark.png").exists()
    assert site._dark_figures(tmp_path) == 0 and page.read_text() == html  # idempotent
    with Image.open(images / "abc.dark.png") as dark, Image.open(images / "abc.png") as light:
        assert dark.size == light.size


@pytest.mark.parametrize("mode", ["RGBA", "P", "L"])
def test_any_png_mode_is_rendered(mode):
    light = _heatmap_png()
    image = light.convert(mode) if mode != "P" else light.quantize(64)
    dark = site.dark_image(image)
    assert dark.size == light.size and dark.mode == "RGB"
    assert tuple(np.asarray(dark)[0, 0]) == site.DARK_PAPER
