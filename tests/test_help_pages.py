"""Every help page of `steer` and `kubectl steer` (launcher/): each renders, and a page both
offer reads the same under both, but for the differences listed in DIFFERENCES, each a choice
of the kubectl front (launcher/kubectl.py).

A page is rendered as a user sees it, by `--help` on the command line, and read back into its
parts: the description, each section's entries (flag or command, and its help), the epilog.
Parts are compared byte for byte, with two things left out on purpose, as layout rather than
content: the usage line (argparse writes it from the same entries, after the program name) and
where a help text is broken into lines (argparse sets the help column by the page's longest
flag, which the kubectl flags move, so a help text is compared with its line breaks joined).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from launcher.commands import build_parser
from launcher.front import Front
from launcher.kubectl import KUBECTL_COMMANDS, KubectlFront

STEER, KUBECTL = "steer only", "kubectl steer only"
DIFFERS = "differs"

# The pages on which `kubectl steer` runs a command (its root and the commands it offers):
# each carries its kubectl flags (launcher/kubectl.py, `_common_flags`).
KUBECTL_FLAG_PAGES = frozenset({"", *KUBECTL_COMMANDS})
# The commands that ask the scorer: `steer` gives them its own flags for that
# (Front.add_scorer_flags), which the kubectl flags replace.
SCORER_PAGES = frozenset({"explain node", "explain nodes", "explain pod", "audit report", "page"})


def _kubectl_flags(page: str) -> set[tuple[str, str, str, str]]:
    """kubectl's flags, in sections of their own, on every page where a command runs, and
    its -o where `steer` has none of the same; `steer`'s own flags for reaching the scorer
    (the same -o) on a page that asks it."""
    if page not in KUBECTL_FLAG_PAGES:
        return set()
    listed = {(page, "kubectl flags", "*", KUBECTL), (page, "where the scorer is", "*", KUBECTL)}
    if page in SCORER_PAGES:
        listed |= {(page, "options", flag, STEER) for flag in ("--scorer URL", "--token TOKEN")}
    else:
        listed.add((page, "options", "-o {table,json}, --output {table,json}", KUBECTL))
    return listed


# (page, section, entry, how): every difference between a page of `steer` and the same page of
# `kubectl steer`, besides the kubectl flags above and the commands only `steer` offers.
DIFFERENCES: set[tuple[str, str, str, str]] = {
    # The root: what the plugin is for, its examples and how it reaches the scorer, --version.
    ("", "description", "", DIFFERS),
    ("", "examples", "*", KUBECTL),
    ("", "epilog", "", KUBECTL),
    ("", "options", "--version", KUBECTL),
    # A pod is named as kubectl names one: [NAMESPACE/]NAME in -n's namespace, -f FILE for a
    # manifest; `steer` takes FILE, or --ref NAMESPACE/NAME, and --namespace for the tenant.
    ("explain pod", "description", "", DIFFERS),
    ("explain pod", "positional arguments", "file", STEER),
    ("explain pod", "positional arguments", "[NAMESPACE/]NAME", KUBECTL),
    ("explain pod", "options", "--ref NAMESPACE/NAME", STEER),
    ("explain pod", "options", "--namespace NAMESPACE", STEER),
    ("explain pod", "options", "-f FILE, --filename FILE", KUBECTL),
    # The report's format is kubectl's -o: json a JSON report, anything else text.
    ("policy validate", "options", "-o {text,json}, --output {text,json}", STEER),
}


@dataclass
class HelpPage:
    description: str = ""
    epilog: str = ""
    # section title -> entry (the flag or command as listed) -> its help, line breaks joined
    sections: dict[str, dict[str, str]] = field(default_factory=dict)


def _blocks(text: str) -> Iterator[list[str]]:
    block: list[str] = []
    for line in text.splitlines():
        if line.strip():
            block.append(line)
        elif block:
            yield block
            block = []
    if block:
        yield block


def read_page(text: str) -> HelpPage:
    page = HelpPage()
    blocks = list(_blocks(text))
    assert blocks and blocks[0][0].startswith("usage: "), text
    for block in blocks[1:]:
        title = block[0]
        if not title.startswith(" ") and title.endswith(":") and len(block) > 1:
            page.sections[title[:-1]] = _entries(block[1:])
        elif page.sections:
            page.epilog += "\n".join(block) + "\n\n"
        else:
            page.description += "\n".join(block) + "\n\n"
    return page


def _entries(lines: list[str]) -> dict[str, str]:
    """A section's entries: a line indented 2 (a flag) or 4 (a command under COMMAND) starts
    one, its invocation up to two spaces, its help after; deeper lines continue the help."""
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if indent <= 4:
            invocation, _, help_text = line.strip().partition("  ")
            current = entries.setdefault(invocation, [])
            line = help_text
        current.append(line.strip())
    return {entry: " ".join(w for w in words if w) for entry, words in entries.items()}


def render(front: Front, words: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        front.parse_args(build_parser(front), [*words, "--help"])
    assert done.value.code == 0, words
    return out.getvalue()


def help_pages(front: Front) -> dict[str, str]:
    """Every page of the front: its root, each group and each command, by its words."""
    return {" ".join(words): render(front, words) for words, _ in build_parser(front).commands()}


def differences(page: str, steer: HelpPage, kubectl: HelpPage) -> set[tuple[str, str, str, str]]:
    found = set()
    for part in ("description", "epilog"):
        mine, theirs = getattr(steer, part), getattr(kubectl, part)
        if mine != theirs:
            how = DIFFERS if mine and theirs else STEER if mine else KUBECTL
            found.add((page, part, "", how))
    for title in steer.sections.keys() | kubectl.sections.keys():
        if title not in kubectl.sections or title not in steer.sections:
            found.add((page, title, "*", STEER if title in steer.sections else KUBECTL))
            continue
        mine, theirs = steer.sections[title], kubectl.sections[title]
        for entry in mine.keys() | theirs.keys():
            if mine.get(entry) == theirs.get(entry):
                continue
            how = (
                DIFFERS
                if entry in mine and entry in theirs
                else STEER
                if entry in mine
                else KUBECTL
            )
            found.add((page, title, entry, how))
    return found


def _commands_only_steer_offers(page: str, steer: set[str]) -> set[tuple[str, str, str, str]]:
    """The entries of a group's command list (COMMAND, ACTION, WHAT) naming a command of
    `steer` (one of the pages `steer`) that the kubectl front does not offer."""
    kubectl = KubectlFront()
    listed = set()
    for path in steer:
        group, _, name = path.rpartition(" ")
        if group == page and path and not kubectl.offers(path):
            listed.add((page, "positional arguments", name, STEER))
    return listed


@pytest.fixture
def pages(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], dict[str, str]]:
    monkeypatch.setenv("COLUMNS", "100")  # the width argparse wraps to, the same for both
    return help_pages(Front()), help_pages(KubectlFront())


def test_every_page_of_kubectl_steer_is_a_page_of_steer_and_the_others_are_not_offered(
    pages: tuple[dict[str, str], dict[str, str]],
) -> None:
    steer, kubectl = pages
    assert len(steer) > 20  # the whole tree was walked
    assert kubectl.keys() < steer.keys()
    front = KubectlFront()
    for page in steer.keys() - kubectl.keys():
        assert not front.offers(page), page
    for page in kubectl:
        assert page == "" or front.offers(page), page


def test_the_pages_both_offer_differ_only_as_listed(
    pages: tuple[dict[str, str], dict[str, str]],
) -> None:
    steer, kubectl = pages
    found: set[tuple[str, str, str, str]] = set()
    expected = set(DIFFERENCES)
    for page in kubectl:
        found |= differences(page, read_page(steer[page]), read_page(kubectl[page]))
        expected |= _kubectl_flags(page) | _commands_only_steer_offers(page, set(steer))
    assert sorted(found - expected) == [], "differences not listed"
    assert sorted(expected - found) == [], "listed differences that no longer occur"


def test_the_common_entries_read_the_same_and_the_usage_names_the_program(
    pages: tuple[dict[str, str], dict[str, str]],
) -> None:
    """What the comparison rests on: a page is read into its parts, and a command's own flag
    under both fronts is one entry with one help text."""
    steer, kubectl = pages
    report = read_page(steer["audit report"]).sections["options"]
    assert report["--limit LIMIT"].startswith("judge at most this many pods")
    assert (
        read_page(kubectl["audit report"]).sections["options"]["--limit LIMIT"]
        == (report["--limit LIMIT"])
    )
    for page in kubectl:
        assert steer[page].startswith(f"usage: steer {page}".rstrip())
        assert kubectl[page].startswith(f"usage: kubectl steer {page}".rstrip())


def test_no_line_of_any_page_is_wider_than_the_terminal(
    pages: tuple[dict[str, str], dict[str, str]],
) -> None:
    """Raw text (kubectl steer's examples) is not wrapped by argparse: it is broken by hand."""
    for front in pages:
        for page, text in front.items():
            wide = [line for line in text.splitlines() if len(line) > 100]
            assert wide == [], page
