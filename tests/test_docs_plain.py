"""The README and docs/ stay plain: short sentences, and a README with no date or commit pin."""

from __future__ import annotations

from pathlib import Path

import pytest
from plain_prose import (
    MAX_MEAN_WORDS,
    MAX_WORDS,
    anchors,
    broken_links,
    count_words,
    doc_files,
    measure,
    paragraphs,
    prose_problems,
    readme_problems,
    split_sentences,
)

ROOT = Path(__file__).resolve().parents[1]


def test_readme_and_docs_keep_their_sentences_short():
    stats = [measure(path, ROOT) for path in doc_files(ROOT)]
    problems = [line for s in stats for line in prose_problems(s)]
    assert not problems, "plain docs (tests/plain_prose.py):\n" + "\n".join(problems)
    assert all(s.sentences for s in stats), "a doc with no prose read: is the splitter right?"


def test_readme_is_a_front_door():
    problems = readme_problems(ROOT / "README.md")
    assert not problems, "\n".join(problems)


def test_doc_links_reach_their_files_and_headings():
    problems = [line for path in doc_files(ROOT) for line in broken_links(path)]
    assert not problems, "\n".join(problems)


# The splitter itself.


@pytest.mark.parametrize(
    ("paragraph", "expected"),
    [
        ("One. Two words. Three words here.", ["One.", "Two words.", "Three words here."]),
        ("Versions 0.5.16 and 0.5.17 differ. So do 2.5 and 3.", 2),
        ("It waits, e.g. for a pass. Then it runs (i.e. again).", 2),
        ("0.5.16 vs. 0.5.17 differ. dpbench starts lower-case.", 2),
        ('He said "stop." Then left.', 2),
        ("Ends with a bracket (like this.) Next one.", 2),
        ("A wait… then more", 1),
        ("Is it? Yes! Good.", 3),
        ("No full stop at the end", 1),
    ],
)
def test_split_sentences(paragraph, expected):
    found = split_sentences(paragraph)
    assert (found if isinstance(expected, list) else len(found)) == expected


def test_words_count_code_as_one_and_links_as_their_text():
    (sentence,) = split_sentences(
        "Run `dpbench twin sweep --seeds 20` as [the twin doc](twin.md#x) says."
    )
    assert count_words(sentence) == 7  # Run, CODE, as, the, twin, doc, says
    assert count_words("0.273 → 0.159 · a / b") == 4


def test_paragraphs_skip_code_tables_headings_and_comments(tmp_path):
    text = (
        "# Heading words\n\nFirst line\ncontinues here.\n\n```bash\nnot. prose. here.\n```\n"
        "| a | b |\n|---|---|\n<!-- a comment. -->\n- item one\n  continued.\n- item two\n"
        "> quoted text.\n\n  | an indented table row |\n"
    )
    assert paragraphs(text) == [
        (3, "First line continues here."),
        (12, "item one continued."),
        (14, "item two quoted text."),
    ]


def test_link_only_paragraphs_are_skipped_and_line_numbers_kept(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("[docs/a.md](docs/a.md)\n\n`make test`\n\nSee [a](a.md).\nSecond one.\n")
    stats = measure(doc)
    assert [(s.line, s.words) for s in stats.sentences] == [(5, 2), (5, 2)]


# The checker fails where it should.


def test_a_long_sentence_is_flagged_with_its_line_and_count(tmp_path):
    doc = tmp_path / "long.md"
    long = " ".join(["word"] * (MAX_WORDS + 1)) + "."
    doc.write_text("# Title\n\nShort one. Another short one.\n\n" + long + "\n")
    problems = prose_problems(measure(doc))
    assert problems and problems[0].startswith(f"{doc}:5: {MAX_WORDS + 1} words")
    doc.write_text(" ".join(["word"] * MAX_WORDS) + ".\n")
    assert not [p for p in prose_problems(measure(doc)) if "words (at most" in p]


def test_a_file_over_the_mean_is_flagged(tmp_path):
    doc = tmp_path / "wordy.md"
    over = int(MAX_MEAN_WORDS) + 2
    doc.write_text(" ".join(["word"] * over) + ". " + " ".join(["word"] * over) + ".\n")
    (problem,) = prose_problems(measure(doc))
    assert f"{over:.1f} words a sentence on average" in problem


def test_a_dated_pinned_or_long_readme_is_flagged(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nMeasured 13 min on 2026-12-03.\n\nAt 5b1112b it took 30 min.\n")
    problems = readme_problems(readme)
    assert any("README.md:3: a date (2026-12-03)" in p for p in problems)
    assert any("README.md:5: a commit pin (5b1112b)" in p for p in problems)
    readme.write_text("# x\n\n" + "line\n" * 130)
    assert readme_problems(readme) == ["README.md: 132 lines (at most 120)"]


def test_numbers_and_words_are_not_commit_pins(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("1234567 requests, defaced 0.5.17 tables, 1,024 of 2,242 steps.\n")
    assert readme_problems(readme) == []


def test_anchors_follow_github(tmp_path):
    text = "# What 0.5.16 → 0.5.17 does\n## Repeated runs: `/flush_cache`\n## Notes\n## Notes\n"
    assert anchors(text) == {
        "what-0516--0517-does",
        "repeated-runs-flush_cache",
        "notes",
        "notes-1",
    }


def test_a_broken_link_or_anchor_is_flagged(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## The part\n")
    doc = tmp_path / "b.md"
    doc.write_text("[ok](a.md#the-part) [gone](c.md) [moved](a.md#old-part) [web](https://x.org)\n")
    assert broken_links(doc) == [
        "b.md:1: c.md: no such file",
        "b.md:1: a.md#old-part: no such heading",
    ]
