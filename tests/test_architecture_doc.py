"""docs/architecture.md names only what exists: every path, every dotted module name, every
``[strict]`` mark and every module of the apps.

The document is where a newcomer learns which module does what; a renamed or split module that
the text still names sends them to a file that is not there. So every backticked token that looks
like a repository path (ends in ``.py``, ``.md``, ``.toml``, ``.html``, ``.js``, ``.css``,
``.yaml`` or ``/``) must exist, written from the repository's root; every backticked dotted name
of a project package (``contextplatform.core.metrics``, ``sources.fetch.fetch_source``) must be a
module, or a module and a name defined in it; a module marked ``[strict]`` must be one mypy checks
in strict mode; and every module of the apps must be named, itself or by its folder. Nothing is
imported: names are found in the files' syntax trees, so no Django app is set up."""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("contextplatform", "tenants", "sources", "compression", "memory")

BACKTICKED = re.compile(r"`([^`\n]+)`")
PATH_LIKE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*(?:\.(?:py|md|toml|html|js|css|yaml)|/)")
DOTTED = re.compile(rf"(?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def backticked(text: str) -> list[str]:
    return BACKTICKED.findall(text)


def doc_paths(text: str) -> list[str]:
    return [token for token in backticked(text) if PATH_LIKE.fullmatch(token)]


def doc_dotted_names(text: str) -> list[str]:
    return [token for token in backticked(text) if DOTTED.fullmatch(token)]


def module_file(parts: list[str]) -> Path | None:
    """The file of the module ``parts`` names, or None when there is no such module."""
    base = ROOT.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


@cache
def defined_names(path: Path, inside: tuple[str, ...] = ()) -> frozenset[str]:
    """Names bound at the top of a module (or of a class in it, ``inside``): definitions,
    assignments and imports."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    for name in inside:
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        if not classes:
            return frozenset()
        body = classes[0].body
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def dotted_problem(name: str) -> str | None:
    """Why ``name`` (``package.module[.Name[.attribute]]``) does not resolve, or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        path = module_file(parts[:end])
        if path is None:
            continue
        rest = parts[end:]
        for depth, attribute in enumerate(rest):
            if attribute not in defined_names(path, tuple(rest[:depth])):
                return f"{'.'.join(parts[: end + depth])} defines no {attribute!r}"
        return None
    return "no such module"


def strict_modules() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return set(tomllib.load(file)["tool"]["mypy"]["files"])


def marked_strict(text: str) -> list[tuple[str, str]]:
    """(path, line) for each line marked ``[strict]``: the paths named on that line."""
    return [
        (path, line) for line in text.splitlines() if "[strict]" in line for path in doc_paths(line)
    ]


def app_modules() -> list[str]:
    """Every module of the packages, as a path from the root (``__init__``, ``apps.py`` and the
    migrations aside: they hold no behaviour of their own to describe)."""
    modules = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if path.name in ("__init__.py", "apps.py") or "migrations" in relative.parts:
                continue
            modules.append(relative.as_posix())
    return modules


def named_by(module: str, paths: set[str]) -> bool:
    """The module is named itself, or by a folder of it below the app's own folder (a
    ``management/commands/`` or an ``admin/`` named as a whole)."""
    if module in paths:
        return True
    parts = module.split("/")
    app_depth = 2 if parts[0] == "contextplatform" else 1
    return any("/".join(parts[:end]) + "/" in paths for end in range(app_depth + 1, len(parts)))


def test_the_document_names_paths_and_modules():
    text = doc_text()
    assert len(doc_paths(text)) > 100
    assert len(doc_dotted_names(text)) > 5


def test_every_named_path_exists():
    missing = sorted({p for p in doc_paths(doc_text()) if not (ROOT / p).exists()})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_named_folder_is_a_folder():
    files = sorted(
        {p for p in doc_paths(doc_text()) if p.endswith("/") and not (ROOT / p).is_dir()}
    )
    assert not files, f"named as folders but not folders: {files}"


def test_every_dotted_module_name_resolves():
    problems = {
        name: problem
        for name in sorted(set(doc_dotted_names(doc_text())))
        if (problem := dotted_problem(name)) is not None
    }
    assert not problems, f"docs/architecture.md names modules that do not resolve: {problems}"


def test_strict_marks_are_the_strictly_checked_modules():
    text = doc_text()
    marked = marked_strict(text)
    assert marked
    strict = strict_modules()
    wrong = sorted({path for path, _ in marked if path not in strict})
    assert not wrong, f"marked [strict] but not in [tool.mypy] files: {wrong}"
    unmarked = sorted(strict - {path for path, _ in marked})
    assert not unmarked, f"in [tool.mypy] files but not marked [strict]: {unmarked}"


def test_every_module_of_the_apps_is_named():
    paths = set(doc_paths(doc_text()))
    unnamed = [m for m in app_modules() if not named_by(m, paths)]
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"


def test_a_wrong_path_or_name_is_caught():
    text = "`contextplatform/resolve/resolver.py` `contextplatform/routing/resolver.py`"
    assert [p for p in doc_paths(text) if not (ROOT / p).exists()] == [
        "contextplatform/routing/resolver.py"
    ]
    assert dotted_problem("contextplatform.resolve.use_cases.resolve_context") is None
    assert dotted_problem("sources.base.ContextSource.after_resolve") is None
    assert dotted_problem("contextplatform.routing.use_cases") is not None
    assert dotted_problem("sources.fetch.no_such_function") is not None
