"""The README and docs/ as a reader meets them: every relative link and anchor resolves, and every
code block a reader is told to run runs.

Links: each `[text](path)`, `[text](path#anchor)`, `[text](#anchor)` and image outside code, in
README.md and docs/*.md, must name an existing file or folder (relative to the page), and an anchor
must be a heading of that Markdown file, slugged as GitHub does (`slug`).

Runs: a block is marked by the line `<!-- run -->` right before its opening fence. A python block
runs in a subprocess with this interpreter, a bash (or plain) block with bash -e, this
environment's bin folder first on PATH (`ascend-grad`, `python`); each in a fresh folder, from the
installed package. A marked block in any other language fails: nothing marked is skipped. The one
marked block left to another test is the README's worked example, which tests/test_readme.py runs
and whose printed line it checks (ELSEWHERE says so, and a test holds it to that).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- run -->"
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
RUNNERS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash", "": "bash"}
# (page, heading of the section, language) -> the test that runs that marked block instead
ELSEWHERE = {("README.md", "From a PyTorch module to a fused training graph", "python"):
             "tests/test_readme.py::test_worked_example_runs"}


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marked: bool
    section: str  # the heading above it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Page:
    path: Path
    headings: list[str]  # slugs, in order, duplicates numbered as GitHub numbers them
    prose: list[tuple[int, str]]  # (1-based line, text) outside fenced code
    blocks: list[Block]
    stray_markers: list[int]  # lines of a marker not followed by a fenced block


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text as rendered (no backticks or emphasis), lowercase,
    every character but letters, digits, spaces, '-' and '_' dropped, spaces made '-'."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def read_page(path: Path) -> Page:
    lines = path.read_text().splitlines()
    headings, prose, blocks, stray, seen = [], [], [], [], {}
    section, fence, start, language, body, marked, pending = "", None, 0, "", [], False, None
    for number, line in enumerate(lines, 1):
        if fence is not None:
            if re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
                blocks.append(Block(path, start, language, "\n".join(body) + "\n", marked, section))
                fence = None
            else:
                body.append(line)
            continue
        opened = FENCE.match(line)
        if opened:
            fence, start, language, body = opened[1], number, opened[2].lower(), []
            marked, pending = pending is not None, None
            continue
        if pending is not None and line.strip():
            stray.append(pending)
            pending = None
        if line.strip() == MARKER:
            pending = number
            continue
        prose.append((number, line))
        heading = HEADING.match(line)
        if heading:
            section = heading[2]
            base = slug(section)
            count = seen.get(base, 0)
            seen[base] = count + 1
            headings.append(base if count == 0 else f"{base}-{count}")
    if pending is not None:
        stray.append(pending)
    return Page(path, headings, prose, blocks, stray)


def link_problems(paths: list[Path]) -> list[str]:
    """Every relative link or anchor in `paths` that does not resolve, as 'page:line: target: why'."""
    pages = {p.resolve(): read_page(p) for p in paths}
    problems = []
    for path, page in pages.items():
        for number, line in page.prose:
            for match in LINK.finditer(INLINE_CODE.sub("", line)):
                target = match[2]
                if SCHEME.match(target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                where = f"{path.name}:{number}: ({target})"
                resolved = (path.parent / file_part).resolve() if file_part else path
                if not resolved.exists():
                    problems.append(f"{where}: no such file or folder {file_part}")
                    continue
                if not anchor:
                    continue
                if resolved.suffix != ".md" or not resolved.is_file():
                    problems.append(f"{where}: an anchor into {file_part}, which is not a Markdown file")
                    continue
                headings = (pages.get(resolved) or read_page(resolved)).headings
                if anchor not in headings:
                    problems.append(f"{where}: no heading #{anchor} in {resolved.name}")
    return problems


def marked_blocks() -> list[Block]:
    return [b for p in PAGES for b in read_page(p).blocks if b.marked]


def _elsewhere(block: Block) -> str | None:
    return ELSEWHERE.get((str(block.page.relative_to(ROOT)), block.section, block.language))


RUN_HERE = [b for b in marked_blocks() if _elsewhere(b) is None]


# ---- the link checker, and the pages

def test_slug_is_githubs():
    assert slug("Ascend NPUs (`runtime_ext/cann/`, `graph_passes/ascend/`)") == "ascend-npus-runtime_extcann-graph_passesascend"
    assert slug("The translations' own speed") == "the-translations-own-speed"
    assert slug("4K aliasing and the page walk") == "4k-aliasing-and-the-page-walk"
    assert slug("Kernels on the AMD EPYC Zen 4, 2026-12-04 (float32, at fd11567)") == \
        "kernels-on-the-amd-epyc-zen-4-2026-12-04-float32-at-fd11567"


def test_the_checker_finds_broken_links(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# B heading\n\n## Twice\n\n## Twice\n")
    (tmp_path / "c.txt").write_text("not markdown\n")
    (tmp_path / "a.md").write_text(
        "# Title\n\n## Sub `section`, one\n\n"
        "[ok](sub/b.md) [ok](sub/b.md#b-heading) [ok](sub/b.md#twice-1) [ok](#sub-section-one) [ok](sub)\n"
        "![ok](c.txt) [external](https://example.invalid/x.md#nope) `[in code](gone.md)`\n"
        "[no file](gone.md) [no anchor](sub/b.md#nope) ![no image](gone.png)\n"
        "[no own anchor](#missing) [anchor into text](c.txt#x) [third twice](sub/b.md#twice-2)\n"
        "```\n[in a block](gone.md)\n```\n")
    problems = link_problems([tmp_path / "a.md", tmp_path / "sub" / "b.md"])
    assert [p.split(": ")[1] for p in problems] == ["(gone.md)", "(sub/b.md#nope)", "(gone.png)", "(#missing)",
                                                   "(c.txt#x)", "(sub/b.md#twice-2)"], problems
    assert all(p.startswith("a.md:") for p in problems)


def test_every_relative_link_and_anchor_resolves():
    problems = link_problems(PAGES)
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme():
    readme = ROOT / "README.md"
    linked = {(readme.parent / m[2].partition("#")[0]).resolve() for _, line in read_page(readme).prose
              for m in LINK.finditer(line)}
    assert {p.resolve() for p in PAGES[1:]} <= linked, "docs pages the README does not link to"


def test_the_ascend_page_holds_the_aarch64_host_section():
    """The aarch64 work fills this section in; the page keeps its heading."""
    assert "atlas--kunpeng-hosts-aarch64" in read_page(ROOT / "docs" / "ascend.md").headings


# ---- the marked blocks

def marker_problems(paths: list[Path]) -> list[str]:
    """Markers that mark no fenced block, and marked blocks in a language no runner takes."""
    pages = [read_page(p) for p in paths]
    stray = [f"{p.path.name}:{n}: {MARKER} not followed by a fenced block" for p in pages for n in p.stray_markers]
    return stray + [f"{b.page.name}:{b.line}: a marked {b.language} block: no runner" for p in pages for b in p.blocks
                    if b.marked and b.language not in RUNNERS]


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if RUNNERS[block.language] == "python":
        command = [sys.executable, "-c", block.code]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    return subprocess.run(command, capture_output=True, text=True, cwd=folder, env=env, timeout=600)


def test_the_marker_check_and_the_runner_catch_what_cannot_run(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(f"# P\n\n{MARKER}\nprose, no block\n\n{MARKER}\n```text\nno runner\n```\n\n"
                    f"{MARKER}\n```python\nraise SystemExit(3)\n```\n\n{MARKER}\n\n```bash\nfalse\necho after\n```\n"
                    f"{MARKER}\n```\nascend-grad ops > ops.txt && ascend-grad no-such-command\n```\n"
                    f"{MARKER}\n```python\nprint('ok')\n```\n```python\nraise SystemExit('not marked')\n```\n")
    assert [p.split(": ", 1)[1] for p in marker_problems([page])] == [
        f"{MARKER} not followed by a fenced block", "a marked text block: no runner"]
    blocks = [b for b in read_page(page).blocks if b.marked and b.language in RUNNERS]
    assert [run_block(b, tmp_path).returncode for b in blocks] == [3, 1, 2, 0]
    assert run_block(blocks[1], tmp_path).stdout == ""  # bash -e stops at the first failure


def test_every_marker_marks_a_block_that_can_run():
    problems = marker_problems(PAGES)
    assert not problems, "\n".join(problems)


def test_the_blocks_left_to_other_tests_are_marked_and_run_there():
    for (page, section, language), test in ELSEWHERE.items():
        blocks = [b for b in marked_blocks() if _elsewhere(b) == test]
        assert len(blocks) == 1, f"{page} '{section}': {len(blocks)} marked {language} blocks, want 1"
        file, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / file).read_text()


def test_the_pages_have_blocks_to_run():
    names = {b.page.name for b in RUN_HERE}
    assert {"README.md", "ops.md", "kernels.md", "graph-pass.md"} <= names, names


@pytest.mark.parametrize("block", RUN_HERE, ids=[b.name for b in RUN_HERE])
def test_marked_block_runs(block, tmp_path):
    done = run_block(block, tmp_path)
    assert done.returncode == 0, f"{block.name} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
