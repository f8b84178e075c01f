"""One number per chapter, read off the built website.

For every chapter the site numbers, the number it shows (in the page's title, in the side bar and in
its figure numbers) must be the number in the notebook's file name; that notebook's checkers, Colab
copy and student copy must carry the same number and name; and the README's chapter table and the
course plan must say the same. The numbers come from the built HTML, never from a list in this file.
No browser is needed: the pages are parsed as text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

import student_edition

from .conftest import ROOT, SITE, _missing

NOTEBOOK_NAME = re.compile(r"(\d\d)_([a-z0-9_]+)\.ipynb")


class _Text(HTMLParser):
    """The text of an HTML page, with the text of every <span class="section-number"> kept apart."""

    def __init__(self) -> None:
        super().__init__()
        self.section_numbers: list[str] = []
        self._in_number = False

    def handle_starttag(self, tag, attrs):
        self._in_number = tag == "span" and ("class", "section-number") in attrs

    def handle_data(self, data):
        if self._in_number:
            self.section_numbers.append(data.strip().rstrip("."))
            self._in_number = False


def _page(path: Path) -> str:
    if not (SITE / "index.html").is_file():
        _missing(f"no built site at {SITE}; run `make book` first")
    return path.read_text(encoding="utf-8")


def _main(html: str) -> str:
    """The page's article, without the side bar and the previous/next links (their numbers are other pages')."""
    start = html.find('<article class="bd-article"')
    end = html.find('<footer class="prev-next-footer', start)
    return html[max(start, 0) : end if end >= 0 else None]


def numbered_chapters() -> dict[int, str]:
    """{number the site shows: notebook stem}, from the side bar of the built home page."""
    html = _page(SITE / "book" / "intro.html")
    links = re.findall(r'<a class="reference internal" href="([^"]+)">\s*(\d+)\.\s', html)
    return {int(number): Path(href).stem for href, number in links}


def test_the_site_numbers_exactly_the_chapter_notebooks_by_their_file_names():
    chapters = numbered_chapters()
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")} - {"00_template"}
    assert chapters, "the side bar of the built site numbers no page"
    assert set(chapters.values()) == notebooks, (
        f"numbered pages {sorted(chapters.values())} are not the chapter notebooks {sorted(notebooks)}"
    )
    for number, stem in chapters.items():
        assert int(stem[:2]) == number, f"the site calls {stem} chapter {number}"


UNNUMBERED = ["intro", "architecture", "conventions", "conclusion", "instructors", "api", "bibliography"]


@pytest.mark.parametrize("page", [f"book/{name}" for name in UNNUMBERED] + ["notebooks/00_template"])
def test_front_and_back_matter_have_no_number(page):
    parser = _Text()
    parser.feed(_main(_page(SITE / f"{page}.html")))
    assert not parser.section_numbers, f"{page} shows section numbers {parser.section_numbers[:3]}"


def test_each_chapter_page_shows_its_own_number_in_its_title_sections_and_figures():
    for number, stem in numbered_chapters().items():
        article = _main(_page(SITE / "notebooks" / f"{stem}.html"))
        parser = _Text()
        parser.feed(article)
        assert parser.section_numbers, f"{stem}: no section number on the page"
        assert parser.section_numbers[0] == str(number), f"{stem}: its title is numbered {parser.section_numbers[0]}"
        wrong = [n for n in parser.section_numbers if n.split(".")[0] != str(number)]
        assert not wrong, f"{stem}: sections numbered {wrong[:3]}"
        figures = re.findall(r"Fig\. (\d+)\.\d+", article)
        assert all(int(f) == number for f in figures), f"{stem}: figures numbered {sorted(set(figures))}"


def test_checkers_colab_and_student_copies_carry_the_chapter_number(tmp_path):
    student_edition.main(["--out", str(tmp_path)])
    students = {p.name for p in (tmp_path / "notebooks").glob("*.ipynb")}
    exercises = {p.stem for p in (ROOT / "transformer_lib" / "exercises").glob("ch[0-9][0-9]_*.py")}
    for number, stem in numbered_chapters().items():
        assert f"ch{number:02d}_{stem[3:]}" in exercises, f"chapter {number} ({stem}) has no exercises/ch{stem}.py"
        assert (ROOT / "colab" / f"{stem}.ipynb").is_file(), f"chapter {number}: no colab/{stem}.ipynb"
        assert f"{stem}.ipynb" in students, f"chapter {number}: the student edition has no {stem}.ipynb"
    assert {f"ch{s}" for s in (p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))} == exercises, (
        "every notebook NN_name has exactly one checker module chNN_name, and no checker module lacks its notebook"
    )


def test_the_readme_and_the_course_plan_give_the_site_s_numbers():
    chapters = numbered_chapters()
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| *(\d+) *\|.*?`notebooks/(\d\d_[a-z0-9_]+)\.ipynb`", readme, re.M))
    assert rows, "the README has no chapter table with `notebooks/NN_name.ipynb` in each row"
    assert {int(n): stem for n, stem in rows.items()} == chapters, "the README's chapter table disagrees with the site"
    plan = _main(_page(SITE / "book" / "instructors.html"))
    cited = re.findall(
        r'Chapter (\d+): <a class="reference internal" href="\.\./notebooks/(\d\d_[a-z0-9_]+)\.html', plan
    )
    assert cited, "the course plan names no chapter by number"
    for number, stem in cited:
        assert chapters.get(int(number)) == stem, f"the course plan calls {stem} chapter {number}"
    assert {stem for _, stem in cited} == set(chapters.values()), "the course plan leaves a chapter out"
