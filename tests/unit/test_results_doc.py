"""docs/RESULTS.md: its links lead somewhere, and its summary table repeats only numbers measured below it.

"Evidence at a glance" opens the file with one row per family of systems, each number copied from the
section that measured it. A number that stands in the table and nowhere else in the file was not
measured there (typed in, rounded otherwise, or left behind when its section changed), so every number
of the table must also stand somewhere else in the file.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "RESULTS.md"
SUMMARY = "## Evidence at a glance"
# 2,712 / 36.65 / 5.4 / 2014: thousands kept together only in groups of three, so "2014, Table" gives 2014
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
INLINE_LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
REFERENCE_LINK = re.compile(r"^\[[^\]]+\]:\s*(\S+)", re.MULTILINE)  # [label]: target
REFERENCE_USE = re.compile(r"\]\[([^\]]+)\]")  # [text][label]


def text() -> str:
    return RESULTS.read_text(encoding="utf-8")


def sections(markdown: str) -> dict[str, str]:
    """Each heading's anchor (GitHub's rule: lower case, punctuation removed, spaces as hyphens, and
    -1, -2, ... after a repeated one) -> its section: the heading and what follows it up to the next
    heading of its level or above. Lines inside code fences are no headings."""
    lines = markdown.splitlines()
    headings: list[tuple[int, int, str]] = []  # (line, level, anchor)
    seen: dict[str, int] = {}
    fenced = False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"(#{1,6})\s+(.+)", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(2).strip().lower()).replace(" ", "-")
        repeats = seen.get(slug, 0)
        seen[slug] = repeats + 1
        headings.append((number, len(heading.group(1)), f"{slug}-{repeats}" if repeats else slug))
    found = {}
    for i, (start, level, anchor) in enumerate(headings):
        end = next((line for line, other, _ in headings[i + 1:] if other <= level), len(lines))
        found[anchor] = "\n".join(lines[start:end])
    return found


def summary_bounds(markdown: str) -> tuple[int, int]:
    assert SUMMARY in markdown, f"{RESULTS} has no section '{SUMMARY}'"
    start = markdown.index(SUMMARY)
    end = markdown.find("\n## ", start + len(SUMMARY))
    return start, len(markdown) if end < 0 else end


def table_rows(section: str) -> list[list[str]]:
    """The cells of each row of the section's table, the header and the |---| line left out."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    return [row for row in rows[1:] if not all(set(cell) <= set("-: ") for cell in row)]


def numbers(markdown: str) -> list[str]:
    """The numbers a reader sees: link targets and reference labels (anchors hold dates) left out."""
    seen = REFERENCE_LINK.sub("", INLINE_LINK.sub("]", REFERENCE_USE.sub("]", markdown)))
    return NUMBER.findall(seen)


def test_every_link_in_results_leads_to_a_heading_or_a_file():
    markdown = text()
    targets = INLINE_LINK.findall(markdown) + REFERENCE_LINK.findall(markdown)
    assert targets, f"no links found in {RESULTS}: the patterns no longer match the file"
    headings = sections(markdown)
    broken = []
    for target in targets:
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            if target[1:] not in headings:
                broken.append(target)
        elif not (RESULTS.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"links in {RESULTS} that lead nowhere (a heading renamed or a file moved): {broken}"


def test_every_reference_label_used_is_defined():
    markdown = text()
    defined = set(re.findall(r"^\[([^\]]+)\]:", markdown, re.MULTILINE))
    used = set(REFERENCE_USE.findall(markdown))
    assert used <= defined, f"link labels used in {RESULTS} but never defined: {sorted(used - defined)}"


def test_summary_table_rows_are_whole():
    start, end = summary_bounds(text())
    section = text()[start:end]
    header = next(line for line in section.splitlines() if line.startswith("|"))
    width = len(header.strip().strip("|").split("|"))
    rows = table_rows(section)
    assert len(rows) >= 10, f"'{SUMMARY}' should hold one row per family; found {len(rows)}"
    wrong = [row[0] for row in rows if len(row) != width]
    assert not wrong, f"rows of '{SUMMARY}' without {width} cells (a '|' inside a cell?): {wrong}"


def test_every_number_of_the_summary_table_is_measured_elsewhere_in_results():
    markdown = text()
    start, end = summary_bounds(markdown)
    elsewhere = set(numbers(markdown[:start] + markdown[end:]))
    missing = [(row[0], number) for row in table_rows(markdown[start:end])
               for number in numbers(" | ".join(row)) if number not in elsewhere]
    assert not missing, (f"numbers in the table of '{SUMMARY}' that stand nowhere else in {RESULTS}: "
                         f"copy each from the section that measured it: {missing}")


def test_the_summary_tables_own_numbers_stand_in_the_section_each_row_links_to():
    markdown = text()
    start, end = summary_bounds(markdown)
    section = markdown[start:end]
    header = [cell.strip() for cell in next(line for line in section.splitlines()
                                            if line.startswith("|")).strip().strip("|").split("|")]
    ours = header.index("ours")
    targets = dict(re.findall(r"^\[([^\]]+)\]:\s*#(\S+)", markdown, re.MULTILINE))
    by_anchor = sections(markdown)
    unlinked, missing = [], []
    for row in table_rows(section):
        label = REFERENCE_USE.search(row[0])
        if not label or targets.get(label.group(1)) not in by_anchor:
            unlinked.append(row[0])
            continue
        measured = set(numbers(by_anchor[targets[label.group(1)]]))
        missing += [(row[0], number) for number in numbers(row[ours]) if number not in measured]
    assert not unlinked, f"rows of '{SUMMARY}' whose system links to no section of {RESULTS}: {unlinked}"
    assert not missing, (f"'ours' numbers of '{SUMMARY}' that the section each row links to does not hold "
                         f"(copy them from where they were measured, or link that section): {missing}")
