// "Add another source": a copy of the formset's empty row, numbered as the next form.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const fieldset = document.querySelector(".route-sources");
  if (!fieldset) return;
  const template = fieldset.querySelector("template.empty-source-row");
  const button = fieldset.querySelector("button.add-source");
  const total = fieldset.querySelector("input[name$='-TOTAL_FORMS']");
  const maximum = fieldset.querySelector("input[name$='-MAX_NUM_FORMS']");
  const rows = fieldset.querySelector("tbody");
  const full = () => Number(total.value) >= Number(maximum.value);

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
