"""Sentence lengths of the project's Markdown prose, the README's front-door rules, and links.

The docs stay plain when their sentences stay short: at most 20 words a sentence on average in
each file, and none over 50. The README is a front door: at most 120 lines, and no date or
commit pin (a measured figure with its date lives under docs/, where it can be kept current).

What counts as prose, and how it is split (a small splitter, tested in test_docs_plain.py):

- Skipped: fenced code blocks, table rows, headings, HTML comments, and paragraphs that hold
  nothing but links or code (a "see [x](x)" line still counts).
- A paragraph is a run of non-blank lines. A list item starts a paragraph of its own, and its
  indented continuation lines belong to it. A block quote's ``>`` is dropped.
- Inline code counts as one word, a link as its text, emphasis marks as nothing. A word is a
  whitespace-separated token holding a letter or a digit ("→", "·", "/" are not words).
- A sentence ends at ``.``, ``!`` or ``?`` (closing quotes, brackets or emphasis may follow)
  before white space, but not after an abbreviation such as "e.g." or "vs.". A paragraph's end
  ends its last sentence, so a list item without a full stop is one sentence. Decimals and
  versions (0.5.17) hold no white space and never split; "…" never ends a sentence.

Relative links must reach a file, and a ``#fragment`` a heading there (GitHub's anchors: lower
case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` … for repeats).

Run it as a script for the figures per file: ``python tests/plain_prose.py [PATH ...]``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_WORDS = 50
MAX_MEAN_WORDS = 20.0
README_MAX_LINES = 120

ABBREVIATIONS = frozenset({"e.g", "i.e", "etc", "vs", "cf", "al", "approx", "incl"})

_FENCE = re.compile(r"^\s*(```|~~~)")
_TABLE = re.compile(r"^\s*\|")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_QUOTE = re.compile(r"^\s*>\s?")
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]*_]*(?=\s)")
_WORD = re.compile(r"\w", re.U)

DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
# A commit pin: 7 to 40 hex digits with at least one digit and one letter a-f, so neither a
# plain number nor an English word ("defaced") reads as one.
COMMIT_PIN = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


@dataclass(frozen=True)
class Sentence:
    path: str
    line: int
    words: int
    text: str


@dataclass(frozen=True)
class FileStats:
    path: str
    sentences: tuple[Sentence, ...]

    @property
    def mean(self) -> float:
        return sum(s.words for s in self.sentences) / len(self.sentences) if self.sentences else 0.0

    @property
    def longest(self) -> int:
        return max((s.words for s in self.sentences), default=0)


def paragraphs(text: str) -> list[tuple[int, str]]:
    """The prose paragraphs of a Markdown text: (first line number, the lines joined)."""
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    found: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    in_fence = False

    def close() -> None:
        if current:
            found.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            close()
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = _QUOTE.sub("", line)
        if not line.strip() or _TABLE.match(line) or _HEADING.match(line):
            close()
            continue
        item = _LIST_ITEM.match(line)
        if item:
            close()
            line = line[item.end() :]
        if not current:
            start = number
        current.append(line.strip())
    close()
    return found


def _plain(paragraph: str) -> str:
    """The paragraph as read: code spans one word, links their text, no emphasis marks."""
    text = _CODE_SPAN.sub("CODE", paragraph)
    text = _IMAGE_OR_LINK.sub(lambda m: m.group(1), text)
    return _EMPHASIS.sub("", text)


def count_words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if _WORD.search(token))


def split_sentences(paragraph: str) -> list[str]:
    """The sentences of one paragraph (see the module's docstring for the rules)."""
    text = _plain(paragraph)
    sentences: list[str] = []
    begin = 0
    for end in _SENTENCE_END.finditer(text):
        rest = text[end.end() :].lstrip()
        previous = text[begin : end.start()].split()
        last_word = previous[-1].lower().lstrip("([\"'").rstrip(".") if previous else ""
        if last_word in ABBREVIATIONS and rest:
            continue
        sentences.append(text[begin : end.end()].strip())
        begin = end.end()
    tail = text[begin:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if count_words(s)]


def _only_links_or_code(paragraph: str) -> bool:
    bare = _IMAGE_OR_LINK.sub("", _CODE_SPAN.sub("", paragraph))
    return count_words(bare) == 0


def measure(path: Path, root: Path | None = None) -> FileStats:
    name = str(path.relative_to(root)) if root else str(path)
    sentences = []
    for line, paragraph in paragraphs(path.read_text(encoding="utf-8")):
        if _only_links_or_code(paragraph):
            continue
        for text in split_sentences(paragraph):
            sentences.append(Sentence(name, line, count_words(text), text))
    return FileStats(name, tuple(sentences))


def prose_problems(stats: FileStats) -> list[str]:
    """One line per sentence over MAX_WORDS, and one for a file whose mean is over MAX_MEAN_WORDS."""
    problems = [
        f"{s.path}:{s.line}: {s.words} words (at most {MAX_WORDS}): {s.text[:70]}…"
        for s in stats.sentences
        if s.words > MAX_WORDS
    ]
    if stats.mean > MAX_MEAN_WORDS:
        problems.append(
            f"{stats.path}: {stats.mean:.1f} words a sentence on average "
            f"(at most {MAX_MEAN_WORDS:g}) over {len(stats.sentences)} sentences"
        )
    return problems


def readme_problems(path: Path) -> list[str]:
    """The README's front-door rules: its length, and no date or commit pin anywhere in it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    problems = []
    if len(lines) > README_MAX_LINES:
        problems.append(f"{path.name}: {len(lines)} lines (at most {README_MAX_LINES})")
    for number, line in enumerate(lines, start=1):
        for kind, pattern in (("a date", DATE), ("a commit pin", COMMIT_PIN)):
            for match in pattern.finditer(line):
                problems.append(
                    f"{path.name}:{number}: {kind} ({match.group(0)}); dated figures live in docs/"
                )
    return problems


_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown text's headings (outside code blocks)."""
    found: set[str] = set()
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not _HEADING.match(line):
            continue
        title = _IMAGE_OR_LINK.sub(lambda m: m.group(1), line.lstrip("# ").strip())
        slug = re.sub(r"[^\w\- ]", "", title.lower().replace("`", "")).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in found:
            n += 1
            anchor = f"{slug}-{n}"
        found.add(anchor)
    return found


def _anchors_of(path: Path) -> set[str]:
    return anchors(path.read_text(encoding="utf-8"))


def broken_links(path: Path) -> list[str]:
    """Each relative link in ``path`` whose file or heading anchor does not exist."""
    text = path.read_text(encoding="utf-8")
    problems = []
    for number, line in enumerate(text.splitlines(), start=1):
        for target in _LINK_TARGET.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, fragment = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                problems.append(f"{path.name}:{number}: {target}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in _anchors_of(dest):
                problems.append(f"{path.name}:{number}: {target}: no such heading")
    return problems


def doc_files(root: Path) -> list[Path]:
    """The files this check holds plain: the README, every Markdown file under docs/, and the
    workload specs' README."""
    return [
        root / "README.md",
        *sorted((root / "docs").rglob("*.md")),
        root / "workloads" / "README.md",
    ]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    paths = [Path(a).resolve() for a in argv] or doc_files(root)
    files = [p for arg in paths for p in (sorted(arg.rglob("*.md")) if arg.is_dir() else [arg])]
    print(f"{'file':40} {'sentences':>9} {'mean':>6} {'max':>5}")
    for path in files:
        stats = measure(path, root if path.is_relative_to(root) else None)
        print(f"{stats.path:40} {len(stats.sentences):9} {stats.mean:6.1f} {stats.longest:5}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
