#!/usr/bin/env python3
"""Checks the relative links between the repository's Markdown files.

Every `[text](target)` and `[name]: target` that is not a URL must name a file that exists (relative to the
file the link is in), and a `#anchor` must match a heading of that file as GitHub
makes anchors from headings. Run from anywhere: `python3 tests/doc-links.py`; it
prints each broken link as `file:line: target: why` and exits 1 if there is one.
"""
import os
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+(\S+)")


def prose_lines(path):
    """(line number, text) of the lines outside code fences."""
    inside = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen = {}
    found = set()
    for _, line in prose_lines(path):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def main():
    files = []
    for folder, subfolders, names in os.walk(ROOT):
        # Build output and other checkouts are not ours to check (and `target` is huge).
        subfolders[:] = [s for s in subfolders if s not in ("target", ".git", "node_modules")]
        files.extend(pathlib.Path(folder, n) for n in names if n.endswith(".md"))
    broken = []
    cache = {}
    for path in sorted(files):
        for number, line in prose_lines(path):
            code = [m.span() for m in re.finditer(r"`[^`]*`", line)]
            targets = [
                m.group(1)
                for m in LINK.finditer(line)
                if not any(a < m.start() < b for a, b in code)
            ]
            definition = DEFINITION.match(line)
            if definition:
                targets.append(definition.group(1))
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                    continue
                if anchor and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        broken.append(f"{where}: no heading with this anchor")
    for b in broken:
        print(b)
    sys.stdout.flush()
    print(f"{len(files)} files checked, {len(broken)} broken links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
