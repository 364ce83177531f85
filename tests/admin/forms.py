"""Read an admin change form's fields out of its HTML, as a browser would submit it."""

from __future__ import annotations

from html.parser import HTMLParser


class FormFields(HTMLParser):
    """Collects the fields of the form with the given id: inputs, checked boxes, selected
    options and textareas (submit buttons left out, so the caller chooses the button)."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id = form_id
        self.inside = False
        self.data: dict[str, list[str]] = {}
        self.select: str | None = None
        self.select_multiple = False
        self.select_first: str | None = None
        self.select_chosen = False
        self.textarea: str | None = None
        self.text = ""

    def add(self, name: str, value: str) -> None:
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {key: value or "" for key, value in attrs}
        if tag == "form" and attributes.get("id") == self.form_id:
            self.inside = True
        if not self.inside:
            return
        name = attributes.get("name")
        if tag == "input" and name:
            kind = attributes.get("type", "text")
            if kind in ("submit", "button", "image", "file"):
                return
            if kind in ("checkbox", "radio") and "checked" not in attributes:
                return
            self.add(name, attributes.get("value", "on" if kind == "checkbox" else ""))
        elif tag == "select" and name:
            self.select, self.select_first, self.select_chosen = name, None, False
            self.select_multiple = "multiple" in attributes
        elif tag == "option" and self.select:
            value = attributes.get("value", "")
            if self.select_first is None:
                self.select_first = value
            if "selected" in attributes:
                self.add(self.select, value)
                self.select_chosen = True
        elif tag == "textarea" and name:
            self.textarea, self.text = name, ""

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.inside:
            self.inside = False
        elif tag == "textarea" and self.textarea:
            # The HTML parser keeps the newline browsers drop right after <textarea>.
            self.add(self.textarea, self.text.removeprefix("\n"))
            self.textarea = None
        elif tag == "select" and self.select:
            nothing_chosen = not self.select_chosen and not self.select_multiple
            if nothing_chosen and self.select_first is not None:
                self.add(self.select, self.select_first)
            self.select = None


def form_data(html: str, form_id: str) -> dict[str, list[str]]:
    parser = FormFields(form_id)
    parser.feed(html)
    return parser.data
