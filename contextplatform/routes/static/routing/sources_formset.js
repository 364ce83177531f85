// "Add another source": a copy of the formset's empty row, numbered as the next form.
// Each row shows only its type's fields (and a rag row its backend's): its data-shows names them,
// drawn by the server (SourceRowForm.shown_fields) and recomputed here as the type, the backend
// or the other settings change. Hidden fields still post what they hold: validation is the same.
"use strict";

function writtenBackend(settingsText) {
  try {
    const settings = JSON.parse(settingsText || "{}");
    return settings && typeof settings.backend === "string" ? settings.backend : "";
  } catch {
    return "";
  }
}

function shownFields(map, row) {
  const value = (suffix) => row.querySelector(`[name$="-${suffix}"]`)?.value || "";
  const type = value("type");
  const shown = map.texts.includes(type) ? ["texts"] : [];
  if (type === "rag") {
    const backend = value("backend") || writtenBackend(value("settings")) || "vectorstore";
    shown.push("backend", ...(map.backends[backend] || []), "judge_note");
  }
  if (type === "realtime_apis") shown.push("connectors");
  return shown.join(" ");
}

document.addEventListener("DOMContentLoaded", () => {
  const fieldset = document.querySelector(".route-sources");
  if (!fieldset) return;
  const template = fieldset.querySelector("template.empty-source-row");
  const button = fieldset.querySelector("button.add-source");
  const total = fieldset.querySelector("input[name$='-TOTAL_FORMS']");
  const maximum = fieldset.querySelector("input[name$='-MAX_NUM_FORMS']");
  const rows = fieldset.querySelector("tbody");
  const full = () => Number(total.value) >= Number(maximum.value);
  const map = JSON.parse(document.getElementById("source-typed-fields").textContent);
  const follow = (event) => {
    const row = event.target.closest("tr.form-row");
    if (row && /-(type|backend|settings)$/.test(event.target.name || "")) {
      row.dataset.shows = shownFields(map, row);
    }
  };
  rows.addEventListener("change", follow);
  rows.addEventListener("input", follow);

  button.hidden = full();
  button.addEventListener("click", () => {
    if (full()) return;
    const index = String(total.value);
    const row = template.content.firstElementChild.cloneNode(true);
    row.id = `sources-${index}`;
    row.querySelectorAll("[name], [id], label[for]").forEach((element) => {
      for (const attribute of ["name", "id", "for"]) {
        const value = element.getAttribute(attribute);
        if (value) element.setAttribute(attribute, value.replaceAll("__prefix__", index));
      }
    });
    rows.appendChild(row);
    total.value = Number(index) + 1;
    button.hidden = full();
    row.querySelector("input, select, textarea")?.focus();
  });
});
