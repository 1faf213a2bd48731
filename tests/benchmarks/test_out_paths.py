"""Where a benchmark writes (``benchmarks.out_paths.beside``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.out_paths import beside


def test_a_prefix_keeps_its_dots_and_its_missing_folder_is_made(tmp_path: Path) -> None:
    path = beside(tmp_path / "new" / "run" / "search-temperature-0.5", ".md")
    assert path == tmp_path / "new" / "run" / "search-temperature-0.5.md"
    path.write_text("written")  # the folder exists: the run's results are not lost
    assert path.read_text() == "written"
