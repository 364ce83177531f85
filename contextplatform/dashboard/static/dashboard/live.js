// The tenant admin's live dashboard: draws each frame of /ws/metrics/ as it arrives.
// A frame is one source outcome of a resolve (contextplatform/live.py):
//   {source, type, status, items, kept, ms, route, at, error}   status: ok, empty, skipped, failed, timeout
// The page starts with the latest resolves from the replay records (#live-history, the same shape
// with "history": true), so that it is not empty until traffic arrives.
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

  // "route/source" -> {route, name, type, color, events, failures, items, kept, lastMs, lastError,
  //                   points: [{at, ms, failed}]}: one source of one route (names repeat across routes)
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
    const key = `${event.route}/${event.source}`;
    let source = sources.get(key);
    if (!source) {
      const color = COLORS[sources.size % COLORS.length];
      source = { route: event.route, name: event.source, type: event.type, color, events: 0,
                 failures: 0, items: 0, kept: 0, lastError: "", points: [] };
      sources.set(key, source);
    }
    const failed = FAILED.has(event.status);
    if (failed) source.lastError = event.error || event.status;
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
    row.dataset.route = event.route;
    const classes = [FAILED.has(event.status) ? "live-failed" : "", event.history ? "live-history" : ""];
    row.className = classes.filter(Boolean).join(" ");
    const time = new Date(event.at * 1000).toLocaleTimeString();
    const values = [time, event.route, event.source, event.type, event.status, event.items, event.kept];
    for (const value of values) row.append(cell("td", value));
    row.append(cell("td", event.ms, "live-ms"), cell("td", event.error || "", "live-error"));
    tbody.prepend(row);
    while (tbody.rows.length > MAX_EVENT_ROWS) tbody.deleteRow(-1);
  }

  function renderSources(tbody) {
    const rows = [...sources.values()].map((source) => {
      const row = document.createElement("tr");
      row.dataset.source = source.name;
      row.dataset.route = source.route;
      row.append(
        cell("td", source.route, "live-route"),
        cell("th", source.name),
        cell("td", source.type),
        cell("td", source.events, "live-events-count"),
        cell("td", source.failures, source.failures ? "live-failures live-failing" : "live-failures"),
        cell("td", source.items, "live-items"),
        cell("td", source.kept, "live-kept"),
        cell("td", source.lastMs),
        cell("td", source.lastError, "live-error"),
      );
      return row;
    });
    tbody.replaceChildren(...rows);
  }

  function renderLegend(list) {
    const entries = [...sources.values()].map((source) => {
      const entry = cell("li", `${source.name} (${source.route})`);
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
    const series = [...sources.values()].map((source) => {
      const name = source.name;
      const group = svg("g", { "data-source": name, "data-route": source.route });
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
    socket.onclose = (closed) => {
      // Refused (4401: not signed in any more, 4403: no permission): retrying cannot help, so
      // say why and stop; any other close (a restart, the network) retries, slower each time.
      if (closed.code === 4401 || closed.code === 4403) {
        setStatus(closed.code === 4401 ? "signed out: reload to sign in" : "not permitted");
        return;
      }
      setStatus("closed");
      setTimeout(() => connect(root, Math.min(retryMs * 2, MAX_RETRY_MS)), retryMs);
    };
  }

  document.addEventListener("DOMContentLoaded", () => {
    const root = document.getElementById("live-dashboard");
    if (!root) return;
    const history = JSON.parse(document.getElementById("live-history")?.textContent || "[]");
    const events = root.querySelector("#live-events tbody");
    for (const event of history) {
      record(event);
      addEventRow(events, event);
    }
    renderChart(root.querySelector("#live-latency"));
    if (history.length) scheduleRender(root);
    connect(root, 1000);
  });
})();
