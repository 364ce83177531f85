"""The ingest answer and a new collection tell what is stored: each document's own status (the
job ran inline here, so ``indexed``, not ``queued``), and 0 documents and 0 chunks, not null."""

from __future__ import annotations

from tests.conftest import ApiClient


def test_the_ingest_answer_says_what_each_document_became(acme_api: ApiClient) -> None:
    made = acme_api.post("/api/v1/collections", {"name": "kb"})
    assert made.status_code == 201, made.content
    assert (made.json()["documents"], made.json()["chunks"]) == (0, 0)

    documents = [
        {"id": "refund", "title": "Refunds", "text": "Refunds take five business days."},
        {"id": "warranty", "title": "Warranty", "text": "Headphones have a two-year warranty."},
    ]
    accepted = acme_api.post("/api/v1/collections/kb/documents", {"documents": documents})
    assert accepted.status_code == 202, accepted.content
    answer = accepted.json()
    assert answer["status"] == "done"
    assert [(d["id"], d["status"], d["error"]) for d in answer["documents"]] == [
        ("refund", "indexed", None),
        ("warranty", "indexed", None),
    ]
    assert all(d["chunks"] >= 1 for d in answer["documents"])
    listed = acme_api.get("/api/v1/collections/kb/documents").json()["data"]
    assert {d["id"]: d["status"] for d in listed} == {
        d["id"]: d["status"] for d in answer["documents"]
    }

    # Posted again unchanged: nothing to re-index, and each still says indexed.
    again = acme_api.post("/api/v1/collections/kb/documents", {"documents": documents[:1]})
    assert [(d["id"], d["status"]) for d in again.json()["documents"]] == [("refund", "indexed")]
    (collection,) = acme_api.get("/api/v1/collections").json()["data"]
    assert collection["documents"] == 2
