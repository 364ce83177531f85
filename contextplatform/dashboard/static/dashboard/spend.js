// The tenant admin's spend page: cost per day as stacked bars, one stack per route or deployment.
// #spend-daily holds {since, until, rows: [{day, group, requests, cost_usd}]} (the page's period,
// in date order; contextplatform/replay/spend_selectors.py daily_spend). Days without requests
// are drawn empty, so the time axis is even.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const CHART = { width: 800, height: 280, left: 72, right: 16, top: 12, bottom: 48 };
  // The live dashboard's palette (live.js): distinct colours in an order where neighbours differ.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#17becf", "#e377c2", "#8c564b",
    "#bcbd22", "#393b79", "#637939", "#8c6d31", "#7b4173", "#3182bd", "#e6550d", "#31a354",
    "#756bb1", "#636363", "#843c39", "#0b7d6e", "#b5cf6b"];
  const DAY_MS = 86400000;

  function colorOf(index) {
    if (index < PALETTE.length) return PALETTE[index];
    return `hsl(${Math.round((index * 137.508) % 360)}, 62%, 42%)`;
  }

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function niceStep(span, count) {
    const raw = span / count;
    const power = 10 ** Math.floor(Math.log10(raw));
    const unit = [1, 2, 5, 10].find((m) => m * power >= raw) || 10;
    return unit * power;
  }

  function daysBetween(since, until) {
    const days = [];
    for (let at = Date.parse(`${since}T00:00:00Z`); at <= Date.parse(`${until}T00:00:00Z`); at += DAY_MS) {
      days.push(new Date(at).toISOString().slice(0, 10));
    }
    return days;
  }

  function money(value) {
    return value >= 1 ? value.toFixed(2) : Number(value.toPrecision(2)).toString();
  }

  function draw(chart, legend, daily) {
    const days = daysBetween(daily.since, daily.until);
    const groups = [...new Set(daily.rows.map((row) => row.group ?? "-"))];
    const costs = new Map();  // day -> group -> cost
    for (const row of daily.rows) {
      if (!costs.has(row.day)) costs.set(row.day, new Map());
      costs.get(row.day).set(row.group ?? "-", row.cost_usd);
    }
    const totals = days.map((day) => [...(costs.get(day)?.values() || [])].reduce((a, b) => a + b, 0));
    const left = CHART.left, bottom = CHART.height - CHART.bottom;
    const width = CHART.width - CHART.left - CHART.right, height = bottom - CHART.top;
    const most = Math.max(...totals, 0);
    const nodes = [
      svg("text", { x: left + width / 2, y: CHART.height - 4, "text-anchor": "middle",
                    class: "spend-axis spend-axis-title" }, "day (UTC)"),
      svg("text", { x: 14, y: CHART.top + height / 2, "text-anchor": "middle",
                    transform: `rotate(-90 14 ${CHART.top + height / 2})`,
                    class: "spend-axis spend-axis-title" }, "cost (USD)"),
    ];
    const step = niceStep(most > 0 ? most * 1.05 : 1, 4);
    const top = most > 0 ? Math.ceil((most * 1.05) / step) * step : step * 4;
    const y = (cost) => bottom - (cost / top) * height;
    for (let cost = 0; cost <= top + step / 2; cost += step) {
      nodes.push(
        svg("line", { x1: left, y1: y(cost), x2: left + width, y2: y(cost), stroke: "#e3e3e3" }),
        svg("text", { x: left - 6, y: y(cost) + 4, "text-anchor": "end", class: "spend-axis" }, money(cost)),
      );
    }
    const slot = width / Math.max(days.length, 1);
    const bar = Math.max(Math.min(slot * 0.7, 40), 1);
    const labelEvery = Math.ceil(days.length / 10);
    days.forEach((day, index) => {
      const x = left + slot * index + (slot - bar) / 2;
      let base = 0;
      groups.forEach((group, place) => {
        const cost = costs.get(day)?.get(group) || 0;
        if (!cost) return;
        const rect = svg("rect", { x: x.toFixed(1), y: y(base + cost).toFixed(1), width: bar.toFixed(1),
                                   height: Math.max(y(base) - y(base + cost), 0.5).toFixed(1),
                                   fill: colorOf(place), "data-day": day, "data-group": group });
        rect.append(svg("title", {}, `${day} ${group}: $${money(cost)}`));
        nodes.push(rect);
        base += cost;
      });
      if (index % labelEvery === 0) {
        nodes.push(svg("text", { x: (left + slot * index + slot / 2).toFixed(1), y: bottom + 16,
                                 "text-anchor": "middle", class: "spend-axis" }, day.slice(5)));
      }
    });
    nodes.push(
      svg("line", { x1: left, y1: CHART.top, x2: left, y2: bottom, stroke: "#999" }),
      svg("line", { x1: left, y1: bottom, x2: left + width, y2: bottom, stroke: "#999" }),
    );
    if (!daily.rows.length) {
      nodes.push(svg("text", { x: left + 8, y: CHART.top + 16, class: "spend-axis" }, "no requests in this period"));
    }
    chart.replaceChildren(...nodes);
    legend.replaceChildren(...groups.map((group, place) => {
      const entry = document.createElement("li");
      entry.textContent = group;
      entry.style.setProperty("--swatch", colorOf(place));
      return entry;
    }));
  }

  document.addEventListener("DOMContentLoaded", () => {
    const chart = document.getElementById("spend-chart");
    if (!chart) return;
    const daily = JSON.parse(document.getElementById("spend-daily").textContent);
    draw(chart, document.getElementById("spend-legend"), daily);
    for (const id of ["spend-days", "spend-stack"]) {
      document.getElementById(id)?.addEventListener("change", (event) => event.target.form.submit());
    }
  });
})();
