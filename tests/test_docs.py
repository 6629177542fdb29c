"""The documentation: generated reference pages are current, every command and option is
documented, links and repository paths in the Markdown resolve, the README stays short."""

from __future__ import annotations

import difflib
import re
import shutil
from pathlib import Path

import click
import pytest

from steptrace import _docs
from steptrace.cli import main as steptrace_cli

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
MARKDOWN = sorted([ROOT / "README.md", ROOT / "bench" / "README.md",
                   *(ROOT / "docs").rglob("*.md")])


# ====================================================================== generated pages
@pytest.mark.parametrize("page", sorted(_docs.PAGES))
def test_generated_page_is_current(page: str) -> None:
    committed = (REFERENCE / page).read_text(encoding="utf-8")
    fresh = _docs.PAGES[page]()
    if committed != fresh:
        diff = "".join(list(difflib.unified_diff(
            committed.splitlines(True), fresh.splitlines(True),
            f"docs/reference/{page} (committed)", f"{page} (the code now)"))[:60])
        pytest.fail(f"docs/reference/{page} is stale: run `make docs` "
                    f"(python -m steptrace._docs) and commit it\n{diff}")


def test_the_generator_walks_every_command_of_the_real_cli() -> None:
    ctx = click.Context(steptrace_cli, info_name="steptrace")
    expected = ["steptrace"] + [f"steptrace {name}"
                                for name in steptrace_cli.list_commands(ctx)]
    walked = [path for path, _, _ in _docs.iter_commands(steptrace_cli)]
    assert walked == expected
    # The commands of the evaluation loop the README teaches are among them.
    assert {"steptrace trace", "steptrace tasks", "steptrace predict", "steptrace score",
            "steptrace report"} <= set(walked)


def test_every_command_and_option_has_a_help_text() -> None:
    assert _docs.undocumented(steptrace_cli) == []


def test_every_command_has_its_help_on_the_cli_page() -> None:
    page = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    for path, command, ctx in _docs.iter_commands(steptrace_cli):
        assert f"\n## {path}\n\n```text\n{command.get_help(ctx).rstrip()}\n```\n" in page, path


def _toy_cli() -> click.Group:
    """A group with a nested group, a hidden command and gaps in its help texts."""
    @click.group()
    def toy() -> None:
        """A toy command."""

    @toy.command()
    @click.option("--good", help="Documented.")
    @click.option("--bare")
    def alpha(good: str, bare: str) -> None:
        """Alpha does a thing."""

    @toy.command()
    def beta() -> None:
        pass

    @toy.group()
    def inner() -> None:
        """A nested group."""

    @inner.command()
    @click.argument("name")
    def leaf(name: str) -> None:
        """Leaf takes NAME (arguments are described in the command's help)."""

    @toy.command(hidden=True)
    def secret() -> None:
        pass

    return toy


def test_walk_is_depth_first_in_help_order_and_skips_hidden_commands() -> None:
    paths = [path for path, _, _ in _docs.iter_commands(_toy_cli(), "toy")]
    assert paths == ["toy", "toy alpha", "toy beta", "toy inner", "toy inner leaf"]


def test_undocumented_names_each_command_and_option_without_help() -> None:
    assert _docs.undocumented(_toy_cli(), "toy") == ["toy alpha --bare: no help text",
                                                     "toy beta: no help text"]


def test_cli_page_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = _docs.cli_page()
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: (40, 24))
    assert _docs.cli_page() == wide


def test_stale_and_missing_pages_are_found_and_rewritten(tmp_path: Path) -> None:
    assert sorted(_docs.write_pages(tmp_path)) == sorted(_docs.PAGES)
    assert _docs.stale_pages(tmp_path) == []
    assert _docs.write_pages(tmp_path) == []  # nothing changed, nothing written
    page = tmp_path / "queries.md"
    page.write_text(page.read_text(encoding="utf-8").replace("hottest_lines", "hot_lines"),
                    encoding="utf-8")
    (tmp_path / "schema.md").unlink()
    assert _docs.stale_pages(tmp_path) == ["queries.md", "schema.md"]
    assert _docs.main(["--check", "--out", str(tmp_path)]) == 1
    assert _docs.main(["--out", str(tmp_path)]) == 0
    assert _docs.stale_pages(tmp_path) == []
    assert _docs.main(["--check", "--out", str(tmp_path)]) == 0


def test_schema_page_is_the_declarations_in_order() -> None:
    """Every declared table (steptrace.store.tables()), in pipeline order, each column
    with the description its declaration gives it."""
    from steptrace.store import tables
    page = _docs.schema_page()
    sections = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    assert sections == [table.name for table in tables()] == [
        "meta", "programs", "runs", "steps", "states", "objects", "attributes",
        "global_states", "settrace_lines", "guests", "analyses", "branches", "tasks",
        "experiments", "predictions", "scores", "checks", "run_features"]
    for table in tables():
        for name, _kind, doc in table.doc_rows():
            assert f"| `{name}` |" in page and (not doc or doc.replace("|", "\\|") in page)


def test_schema_page_shows_keys_types_and_nullability() -> None:
    page = _docs.schema_page()
    assert ("## runs\n\nOne row per (program, input); made by `trace`.\n"
            "Primary key: (run_id).\nUnique: (run_key).\n") in page
    assert ("| `run_id` | BIGINT | no | primary key |\n"
            "| `program_id` | BIGINT | no | → programs |") in page
    assert "| `output` | VARCHAR | yes |" in page
    assert "Primary key: (task_id, model, label, sample_index)." in page
    assert "| `branch_entropy` | DOUBLE | yes |" in page


def test_queries_page_shows_parameters_requirements_and_columns() -> None:
    page = _docs.queries_page()
    assert "| `limit` | int >= 1 | `10` | rows to return |" in page
    assert ("- `tasks` (task_id, kind, run_id): run steptrace tasks first") in page
    assert ("Returns: `status` VARCHAR, `runs` BIGINT, `matching` BIGINT, "
            "`not_matching` BIGINT, `line_steps` HUGEINT.") in page


# ====================================================================== the Markdown
def test_readme_is_short_and_its_quick_start_is_two_commands() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    quick = text.split("## Quick start", 1)[1].split("```", 2)[1]
    assert quick.strip().splitlines() == ["make demo", "make test"]


def test_make_demo_says_how_to_put_steptrace_on_path() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "source $(VENV)/bin/activate" in demo.splitlines()[-1]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _outside_code(text: str) -> str:
    """``text`` without fenced blocks and inline code, where brackets are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in _LINK.findall(_outside_code(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert broken == []


_REPO_PATH = re.compile(r"`((?:engine|wasm_sandbox|tracer|queries|tests|bench|docs)/[^`\s]*)`")


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_repository_paths_named_in_code_spans_exist(path: Path) -> None:
    """A path such as `engine/tasks/_tasks.py` written in the text names a real file or
    folder (placeholders such as `<kind>.<style>.txt` and globs are not checked)."""
    missing = [name for name in _REPO_PATH.findall(path.read_text(encoding="utf-8"))
               if not re.search(r"[<>*{}]", name) and not (ROOT / name.rstrip("/")).exists()]
    assert missing == []
