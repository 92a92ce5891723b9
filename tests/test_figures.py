"""zofl.figures: the project's PNGs in 256 colours, close to matplotlib's drawing, and smaller."""
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

from zofl.figures import main, save  # noqa: E402


def _figure():
    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.linspace(0, 10, 200)
    for k in range(8):
        ax.plot(x, np.sin(x + k), label=f"line {k}")
        ax.fill_between(x, np.sin(x + k) - 0.2, np.sin(x + k) + 0.2, alpha=0.2)
    ax.legend()
    return fig


def test_a_png_is_written_in_256_colours_close_to_the_drawing_and_smaller(tmp_path):
    fig = _figure()
    raw = io.BytesIO()
    fig.savefig(raw, format="png", dpi=80)
    save(fig, tmp_path / "f.png", dpi=80)
    plt.close(fig)
    with Image.open(tmp_path / "f.png") as im:
        assert im.mode == "P" and im.format == "PNG"
        ours = np.asarray(im.convert("RGB"), dtype=int)
    drawn = np.asarray(Image.open(raw).convert("RGB"), dtype=int)
    assert ours.shape == drawn.shape
    assert np.abs(ours - drawn).mean() < 2.5  # grey levels of 255; the committed figures: 1.2 on average, 1.9 at most
    assert (tmp_path / "f.png").stat().st_size < 0.6 * len(raw.getvalue())


def test_other_types_are_matplotlibs_own(tmp_path):
    fig = _figure()
    save(fig, tmp_path / "f.pdf", dpi=80)
    plt.close(fig)
    assert (tmp_path / "f.pdf").read_bytes()[:5] == b"%PDF-"


def test_reencoding_equals_saving_and_refuses_a_non_png_before_rewriting(tmp_path, capsys):
    fig = _figure()
    fig.savefig(tmp_path / "old.png", dpi=80)  # a figure written before zofl.figures
    save(fig, tmp_path / "new.png", dpi=80)
    plt.close(fig)
    before = (tmp_path / "old.png").read_bytes()
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "old.png"), str(tmp_path / "notes.txt")])
    assert exc.value.code == 2 and "notes.txt: not a PNG" in capsys.readouterr().err
    assert (tmp_path / "old.png").read_bytes() == before  # nothing rewritten
    assert main([str(tmp_path / "old.png")]) == 0
    assert (tmp_path / "old.png").read_bytes() == (tmp_path / "new.png").read_bytes()
