"""The Cranfield 1400 test collection: documents, queries and relevance judgements.

Reused by the judge calibration (``scripts/calibrate_judge.py``) and the retrieval benchmark.

The files (``../shared/data/cranfield/`` beside the repository, or ``$CRANFIELD_DIR``):

* ``cran.all.1400``: 1,400 abstracts, fields ``.I`` id, ``.T`` title, ``.A`` authors,
  ``.B`` bibliography, ``.W`` text. The text repeats the title. A few records are damaged: stray
  ``.A``/``.B``/``.W`` lines inside the text (documents 240, 576, 578) are dropped, the text around
  them kept; two documents (471, 995) are empty.
* ``cran.qry``: 225 queries whose ``.I`` numbers are NOT consecutive (1, 2, 4, 8, ...).
* ``cranqrel``: ``query doc code`` lines where ``query`` is the query's position in ``cran.qry``
  (1..225), not its ``.I`` number. Codes 1..4 are relevance grades; ``-1`` marks a pair judged of
  no interest and is dropped here. The direction of the 1..4 scale is disputed (the readme says
  1 = complete answer, ir_datasets reads 4 as the most relevant), so this module keeps the raw
  code and calls any listed pair relevant.

All ids are ints; ``Query.id`` is the qrels number (1..225) and ``Query.source_id`` the ``.I``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "cranfield"
FIELDS = {".T": "title", ".A": "authors", ".B": "bibliography", ".W": "text"}


@dataclass(frozen=True)
class Document:
    id: int
    title: str
    authors: str
    bibliography: str
    text: str

    @property
    def content(self) -> str:
        """Title and text once: the text already starts with the title in most records."""
        if not self.title or self.text.startswith(self.title):
            return self.text
        return f"{self.title}\n{self.text}".strip()


@dataclass(frozen=True)
class Query:
    id: int  # 1..225, the number cranqrel uses
    source_id: int  # the .I number in cran.qry
    text: str


@dataclass(frozen=True)
class Cranfield:
    documents: list[Document]
    queries: list[Query]
    qrels: dict[int, dict[int, int]]  # query id (1..225) -> document id -> relevance code 1..4

    @cached_property
    def documents_by_id(self) -> dict[int, Document]:
        return {document.id: document for document in self.documents}

    def relevant(self, query_id: int) -> set[int]:
        return set(self.qrels.get(query_id, {}))


def data_dir(directory: str | Path | None = None) -> Path:
    return Path(directory or os.environ.get("CRANFIELD_DIR") or DEFAULT_DIR)


def load(directory: str | Path | None = None) -> Cranfield:
    root = data_dir(directory)
    queries = load_queries(root / "cran.qry")
    qrels = load_qrels(root / "cranqrel")
    unknown = set(qrels) - {query.id for query in queries}
    if unknown:
        raise ValueError(f"cranqrel names queries not in cran.qry: {sorted(unknown)[:5]}")
    return Cranfield(documents=load_documents(root / "cran.all.1400"), queries=queries, qrels=qrels)


def load_documents(path: Path) -> list[Document]:
    documents = []
    for record_id, lines in _records(path):
        fields = _fields(lines)
        documents.append(
            Document(
                id=record_id,
                title=fields["title"],
                authors=fields["authors"],
                bibliography=fields["bibliography"],
                text=fields["text"],
            )
        )
    return documents


def load_queries(path: Path) -> list[Query]:
    return [
        Query(id=position, source_id=record_id, text=_fields(lines)["text"])
        for position, (record_id, lines) in enumerate(_records(path), start=1)
    ]


def load_qrels(path: Path) -> dict[int, dict[int, int]]:
    qrels: dict[int, dict[int, int]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3:
            raise ValueError(f"{path}:{number}: expected 'query doc code', got {line!r}")
        query_id, doc_id, code = (int(part) for part in parts)
        if code > 0:
            qrels.setdefault(query_id, {})[doc_id] = code
    return qrels


def _records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(id, lines)`` per ``.I`` record, line endings normalised."""
    record_id: int | None = None
    lines: list[str] = []
    for line in path.read_text().splitlines():
        line = line.rstrip()
        if line.startswith(".I "):
            if record_id is not None:
                yield record_id, lines
            record_id, lines = int(line.split()[1]), []
        elif record_id is not None:
            lines.append(line)
    if record_id is not None:
        yield record_id, lines


def _fields(lines: list[str]) -> dict[str, str]:
    """Split a record into its fields; once ``.W`` starts, everything else is text."""
    collected: dict[str, list[str]] = {name: [] for name in FIELDS.values()}
    current: str | None = None
    for line in lines:
        marker = line.strip()
        if marker in FIELDS:
            if current != "text":
                current = FIELDS[marker]
            continue
        if current is not None:
            collected[current].append(line.strip())
    return {name: " ".join(" ".join(parts).split()) for name, parts in collected.items()}
