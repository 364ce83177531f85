// The tenant admin's live dashboard: draws each frame of /ws/metrics/ as it arrives.
// A frame is one source outcome of a resolve (contextplatform/live.py):
//   {source, type, status, items, kept, ms, route, at}   status: ok, empty, skipped, failed, timeout
// The socket authenticates with this page's admin session (same host, same origin).
"use strict";

(() => {
  const FAILED = new Set(["failed", "timeout"]);
  const MAX_EVENT_ROWS = 50;
  const MAX_POINTS_PER_SOURCE = 200;
  const MAX_RETRY_MS = 30000;
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const FAILURE_COLOR = "#c62828";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const CHART = { width: 800, height: 240, left: 56, right: 16, top: 12, bottom: 28 };

  // name -> {type, color, events, failures, items, kept, lastMs, points: [{at, ms, failed}]}
  const sources = new Map();
  let renderQueued = false;

  function cell(tag, text, className) {
    const node = document.createElement(tag);
    node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function record(event) {
    let source = sources.get(event.source);
    if (!source) {
      const color = COLORS[sources.size % COLORS.length];
      source = { type: event.type, color, events: 0, failures: 0, items: 0, kept: 0, points: [] };
      sources.set(event.source, source);
    }
    const failed = FAILED.has(event.status);
    source.events += 1;
    source.failures += failed ? 1 : 0;
    source.items += event.items;
    source.kept += event.kept;
    source.lastMs = event.ms;
    source.points.push({ at: event.at, ms: event.ms, failed });
    if (source.points.length > MAX_POINTS_PER_SOURCE) source.points.shift();
  }

  function addEventRow(tbody, event) {
    const row = document.createElement("tr");
    row.dataset.source = event.source;
    row.dataset.status = event.status;
    if (FAILED.has(event.status)) row.className = "live-failed";
    const time = new Date(event.at * 1000).toLocaleTimeString();
    const values = [time, event.route, event.source, event.type, event.status, event.items];
    for (const value of [...values, event.kept, event.ms]) row.append(cell("td", value));
    tbody.prepend(row);
    while (tbody.rows.length > MAX_EVENT_ROWS) tbody.deleteRow(-1);
  }

  function renderSources(tbody) {
    const rows = [...sources].map(([name, source]) => {
      const row = document.createElement("tr");
      row.dataset.source = name;
      row.append(
        cell("th", name),
        cell("td", source.type),
        cell("td", source.events, "live-events-count"),
        cell("td", source.failures, source.failures ? "live-failures live-failing" : "live-failures"),
        cell("td", source.items, "live-items"),
        cell("td", source.kept, "live-kept"),
        cell("td", source.lastMs),
      );
      return row;
    });
    tbody.replaceChildren(...rows);
  }

  function renderLegend(list) {
    const entries = [...sources].map(([name, source]) => {
      const entry = cell("li", name);
      entry.style.setProperty("--swatch", source.color);
      return entry;
    });
    list.replaceChildren(...entries);
  }

  function renderChart(chart) {
    const points = [...sources.values()].flatMap((source) => source.points);
    const left = CHART.left, bottom = CHART.height - CHART.bottom;
    const width = CHART.width - CHART.left - CHART.right, height = bottom - CHART.top;
    const axes = [
      svg("line", { x1: left, y1: CHART.top, x2: left, y2: bottom, stroke: "#999" }),
      svg("line", { x1: left, y1: bottom, x2: left + width, y2: bottom, stroke: "#999" }),
    ];
    if (!points.length) {
      chart.replaceChildren(...axes, svg("text", { x: left + 8, y: CHART.top + 16, class: "live-axis" }, "waiting for resolves"));
      return;
    }
    const first = Math.min(...points.map((p) => p.at));
    const last = Math.max(first + 1, ...points.map((p) => p.at));
    const topMs = Math.max(1, ...points.map((p) => p.ms)) * 1.1;
    const x = (at) => (left + ((at - first) / (last - first)) * width).toFixed(1);
    const y = (ms) => (bottom - (ms / topMs) * height).toFixed(1);
    const clock = (at) => new Date(at * 1000).toLocaleTimeString();
    const labels = [
      svg("text", { x: left - 6, y: CHART.top + 10, "text-anchor": "end", class: "live-axis" }, topMs.toFixed(0)),
      svg("text", { x: left - 6, y: bottom, "text-anchor": "end", class: "live-axis" }, 0),
      svg("text", { x: left, y: CHART.height - 8, class: "live-axis" }, clock(first)),
      svg("text", { x: left + width, y: CHART.height - 8, "text-anchor": "end", class: "live-axis" }, clock(last)),
    ];
    const series = [...sources].map(([name, source]) => {
      const group = svg("g", { "data-source": name });
      const line = source.points.map((p) => `${x(p.at)},${y(p.ms)}`).join(" ");
      group.append(svg("polyline", { points: line, fill: "none", stroke: source.color, "stroke-width": 1.5 }));
      for (const point of source.points) {
        const fill = point.failed ? FAILURE_COLOR : source.color;
        const dot = svg("circle", { cx: x(point.at), cy: y(point.ms), r: point.failed ? 4 : 2.5, fill });
        dot.append(svg("title", {}, `${name}: ${point.ms} ms${point.failed ? " (failed)" : ""}`));
        group.append(dot);
      }
      return group;
    });
    chart.replaceChildren(...axes, ...labels, ...series);
  }

  function scheduleRender(root) {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      renderChart(root.querySelector("#live-latency"));
      renderLegend(root.querySelector("#live-legend"));
      renderSources(root.querySelector("#live-sources tbody"));
    });
  }

  function setStatus(state) {
    const status = document.getElementById("live-status");
    status.dataset.state = state;
    status.textContent = state;
  }

  function connect(root, retryMs) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + root.dataset.socketPath);
    socket.onopen = () => {
      retryMs = 1000;
      setStatus("live");
    };
    socket.onmessage = (message) => {
      const event = JSON.parse(message.data);
      record(event);
      addEventRow(root.querySelector("#live-events tbody"), event);
      scheduleRender(root);
    };
    socket.onclose = () => {
      // A refused handshake (no staff session any more) closes too: retry, slower each time.
      setStatus("closed");
      setTimeout(() => connect(root, Math.min(retryMs * 2, MAX_RETRY_MS)), retryMs);
    };
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("live-dashboard");
    if (!root) return;
    renderChart(root.querySelector("#live-latency"));
    connect(root, 1000);
  });
})();
