"""``python manage.py migrate_config FILE [--output OUT]``: rewrite a legacy configuration file
(``rag``, ``memory`` and ``context_compression`` plugins and their removed fields) to the context
plugin's form. Prints the result, or writes OUT; notes on what was dropped go to stderr. A result
the import would still refuse is written too, and the command then fails (exit status 1) saying
why: a document left as it was is not a migrated one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from contextplatform.routes.configuration.documents import import_problem
from contextplatform.routes.configuration.legacy import MigrationError, migrate_document


def read_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"{path}: cannot read it ({error})") from None
    try:
        return yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise CommandError(f"{path}: not valid YAML or JSON ({error})".replace("\n", " ")) from None


def render(document: dict[str, Any], output_format: str) -> str:
    if output_format == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=False)


class Command(BaseCommand):
    help = (
        "Rewrite a legacy rag / memory / context_compression configuration to the context plugin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="the legacy YAML or JSON file")
        parser.add_argument("--output", "-o", type=Path, help="write here instead of printing")
        parser.add_argument(
            "--format",
            choices=["yaml", "json"],
            help="output format (default: json for an --output ending in .json, else yaml)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source: Path = options["file"]
        output: Path | None = options["output"]
        written = read_document(source)
        try:
            migration = migrate_document(written)
        except MigrationError as error:
            raise CommandError(f"{source}: {error}") from None
        for note in migration.notes:
            self.stderr.write(f"note: {note}")
        if migration.document == written and not migration.notes:
            self.stderr.write("note: nothing to rewrite: the file is in the context plugin's form")
        problem = import_problem(migration.document)
        output_format = options["format"] or (
            "json" if output and output.suffix.lower() == ".json" else "yaml"
        )
        text = render(migration.document, output_format)
        if output is None:
            self.stdout.write(text, ending="")
        else:
            output.write_text(text, encoding="utf-8")
            self.stderr.write(f"wrote {output}")
        if problem is not None:
            raise CommandError(f"{source}: the result will not import as it is: {problem}")
