#!/usr/bin/python3
"""Checks every relative link of the project's Markdown (README.md,
MIGRATING.md, docs/**/*.md): the file or folder it names exists, and a
#fragment names a heading of the Markdown file it points into, by GitHub's
anchor rules (lowercase; punctuation other than '-' and '_' dropped; each
space a '-'; a repeated heading gets -1, -2, ...). Links with a scheme
(http:, https:, mailto:) are not followed. Code (fenced blocks, indented
blocks, `spans`) is not read for links.

  /usr/bin/python3 tests/docs/check_links.py SOURCE_ROOT   # CTest docs_links
"""

import pathlib
import re
import sys

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?"
                    r"(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")


def markdown_files(root):
    files = [root / "README.md", root / "MIGRATING.md"]
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def prose_lines(path):
    """(line number, text) of the lines outside code blocks."""
    fence = None
    previous_blank = True
    in_indented = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and \
                    len(match.group(1)) >= len(fence):
                fence = None
            previous_blank = False
            continue
        if match:
            fence = match.group(1)
            continue
        blank = not line.strip()
        if not blank and line.startswith("    ") and \
                (previous_blank or in_indented):
            in_indented = True  # an indented code block
            previous_blank = False
            continue
        if not blank:
            in_indented = False
        previous_blank = blank
        yield number, line


def strip_code_spans(line):
    return re.sub(r"(`+)(.+?)\1", "", line)


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        for _, line in prose_lines(path):
            for name in HTML_ANCHOR.findall(line):
                found.add(name)
            match = HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else "%s-%d" % (base, count))
        cache[path] = found
    return cache[path]


def links(path):
    for number, line in prose_lines(path):
        text = strip_code_spans(line)
        for target in INLINE.findall(text):
            yield number, target
        match = REFERENCE.match(text)
        if match:
            yield number, match.group(1)


def check(root):
    problems = []
    checked = 0
    for md in markdown_files(root):
        shown = md.relative_to(root)
        for number, target in links(md):
            if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # http:, https:, mailto:, ...
            checked += 1
            where = "%s:%d: %s" % (shown, number, target)
            file_part, _, fragment = target.partition("#")
            if file_part.startswith("/"):
                problems.append(where + ": an absolute path; link relative "
                                "to the file instead")
                continue
            destination = (md.parent / file_part).resolve() if file_part \
                else md
            if not destination.exists():
                problems.append(where + ": no such file or folder")
                continue
            if not fragment:
                continue
            if destination.is_dir() or destination.suffix != ".md":
                problems.append(where + ": a #fragment into something that "
                                "is not a Markdown file")
                continue
            if fragment not in anchors(destination):
                problems.append(
                    "%s: no heading with the anchor #%s in %s (its anchors: "
                    "%s)" % (where, fragment, destination.relative_to(root),
                             ", ".join(sorted(anchors(destination)))))
    return checked, problems


def main():
    if len(sys.argv) != 2:
        print("usage: check_links.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    checked, problems = check(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("%d of %d relative links are broken" % (len(problems), checked),
              file=sys.stderr)
        return 1
    print("%d relative links checked, all resolve" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
