"""CRUXEval's own prompts as steptrace templates, read from a user's copy of the official
repository (facebookresearch/cruxeval: its ``prompts.py``), so that tasks ask exactly what
the published numbers asked.

The repository's prompts are Python functions returning an f-string
(``make_direct_output_prompt``: ``{code}`` and ``{input}``; ``make_direct_input_prompt``:
``{code}`` and ``{output}``). The file is parsed with ``ast``, never run (it is another
party's code), and each function's returned f-string becomes a ``<kind>.cruxeval.txt``
template: its text as it is (a ``$`` written ``$$``), each ``{name}`` the placeholder
``$name``. ``steptrace tasks --prompt cruxeval --template-dir DIR`` then renders them with
the run's code, input and output as CRUXEval renders them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from steptrace.corpus._text import read_utf8
from steptrace.errors import InputError

# kind -> (the function of prompts.py, the f-string's names it may use)
OFFICIAL_PROMPTS = {"output": ("make_direct_output_prompt", ("code", "input")),
                    "input": ("make_direct_input_prompt", ("code", "output"))}


@dataclass(frozen=True)
class OfficialTemplate:
    kind: str
    function: str
    text: str  # a string.Template's text


def prompts_file(path: Path) -> Path:
    """``path``'s ``prompts.py``: the file itself, or the one at the top of a checkout."""
    path = Path(path)
    found = path / "prompts.py" if path.is_dir() else path
    if not found.is_file():
        raise InputError(f"no CRUXEval prompts at {path}: give the repository's directory "
                         "(a checkout of facebookresearch/cruxeval) or its prompts.py")
    return found


def official_templates(path: Path) -> list[OfficialTemplate]:
    """The templates of ``OFFICIAL_PROMPTS`` read from ``path`` (``prompts_file``)."""
    source = prompts_file(path)
    try:
        tree = ast.parse(read_utf8(source), filename=str(source))
    except SyntaxError as exc:
        raise InputError(f"{source}:{exc.lineno}: not Python ({exc.msg})") from None
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    found = []
    for kind, (name, names) in OFFICIAL_PROMPTS.items():
        if name not in functions:
            raise InputError(f"{source}: no function {name}")
        found.append(OfficialTemplate(kind, name, _template(functions[name], names, source)))
    return found


def _template(function: ast.FunctionDef, names: tuple[str, ...], source: Path) -> str:
    """The template of the f-string ``function`` returns."""
    returned = [node.value for node in ast.walk(function)
                if isinstance(node, ast.Return) and node.value is not None]
    if len(returned) != 1 or not isinstance(returned[0], (ast.JoinedStr, ast.Constant)):
        raise InputError(f"{source}:{function.lineno}: {function.name} does not return one "
                         "f-string")
    value = returned[0]
    parts = value.values if isinstance(value, ast.JoinedStr) else [value]
    text = []
    for part in parts:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text.append(part.value.replace("$", "$$"))
        elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
              and part.value.id in names and part.conversion == -1
              and part.format_spec is None):
            text.append("$" + part.value.id)
        else:
            raise InputError(f"{source}:{getattr(part, 'lineno', function.lineno)}: "
                             f"{function.name}'s f-string may only use "
                             f"{', '.join('{' + n + '}' for n in names)}")
    return "".join(text)


def write_official_templates(path: Path, out: Path) -> list[Path]:
    """Write ``<kind>.cruxeval.txt`` for each official prompt into the directory ``out``
    (made if missing); the files written."""
    templates = official_templates(path)
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for template in templates:
            target = out / f"{template.kind}.cruxeval.txt"
            target.write_text(template.text, encoding="utf-8")
            written.append(target)
    except OSError as exc:
        raise InputError(f"cannot write templates to {out}: {exc.strerror or exc}") from None
    return written
