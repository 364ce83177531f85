// The tenant admin's live dashboard: draws each frame of /ws/metrics/ as it arrives.
// A frame is one source outcome of a resolve (contextplatform/live.py):
//   {source, type, status, items, kept, ms, route, at, error}   status: ok, empty, skipped, failed, timeout
// The page starts with the latest resolves from the replay records (#live-history, the same shape
// with "history": true), so that it is not empty until traffic arrives.
// The socket authenticates with this page's admin session (same host, same origin).
// Each source's health per route (#live-health at load, then data-health-path every
// HEALTH_REFRESH_MS and shortly after new events: GET /api/v1/sources/health's rows) marks the
// sources that raise an alert (stopped_returning_hits, failing, slow) in the sources table.
// A frame with "kind": "call" is one call the gateway carried (contextplatform/gateway/call_metrics.py):
//   {kind, route, deployment, status, ms, input_tokens, output_tokens, cached_input_tokens, cost_usd, at}
//   status: ok, rejected, failed, refused, incomplete; cost_usd null when the deployment is unpriced.
// The calls table sums them per route and deployment, with the page's totals above it.
"use strict";

(() => {
  const FAILED = new Set(["failed", "timeout"]);
  const MAX_EVENT_ROWS = 50;
  const MAX_POINTS_PER_SOURCE = 200;
  const MAX_RETRY_MS = 30000;
  // Distinct colours, none of them the failure red, in an order where neighbours differ; past
  // them, hues spread by the golden angle, so that no colour repeats.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#17becf", "#e377c2", "#8c564b",
    "#bcbd22", "#393b79", "#637939", "#8c6d31", "#7b4173", "#3182bd", "#e6550d", "#31a354",
    "#756bb1", "#636363", "#843c39", "#0b7d6e", "#b5cf6b"];
  const FAILURE_COLOR = "#c62828";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const CHART = { width: 800, height: 260, left: 64, right: 16, top: 12, bottom: 44 };
  const SLIDE_MS = 5000;  // the window follows the clock even while no traffic arrives
  const HEALTH_REFRESH_MS = 15000;
  const HEALTH_AFTER_EVENTS_MS = 2000;  // events arrive in bursts: one read after each burst
  const ALERT_WORDS = { stopped_returning_hits: "stopped returning hits", failing: "failing", slow: "slow" };

  function colorOf(index) {
    if (index < PALETTE.length) return PALETTE[index];
    return `hsl(${Math.round((index * 137.508) % 360)}, 62%, 42%)`;
  }

  function windowSeconds() {
    const select = document.getElementById("live-window");
    return select ? Number(select.value) : 900;
  }

  // Seconds between the time axis's ticks: steps a clock reads at a glance.
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];

  function niceStep(span, count) {
    const raw = span / count;
    const power = 10 ** Math.floor(Math.log10(raw));
    const unit = [1, 2, 5, 10].find((m) => m * power >= raw) || 10;
    return unit * power;
  }

  // "route/source" -> {route, name, type, color, events, failures, items, kept, lastMs, lastError,
  //                   points: [{at, ms, failed}]}: one source of one route (names repeat across routes)
  const sources = new Map();
  // "route/source" -> a row of GET /api/v1/sources/health
  const health = new Map();
  // "route/deployment" -> {route, deployment, calls, errors, totalMs, lastMs, input, cached, output, cost}
  const calls = new Map();
  let renderQueued = false;
  let healthQueued = false;

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
      const color = colorOf(sources.size);
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

  function recordCall(event) {
    const key = `${event.route}/${event.deployment}`;
    let group = calls.get(key);
    if (!group) {
      group = { route: event.route, deployment: event.deployment, calls: 0, errors: 0, totalMs: 0,
                lastMs: 0, input: 0, cached: 0, output: 0, cost: 0 };
      calls.set(key, group);
    }
    group.calls += 1;
    group.errors += event.status === "ok" ? 0 : 1;
    group.totalMs += event.ms;
    group.lastMs = event.ms;
    group.input += event.input_tokens;
    group.cached += event.cached_input_tokens;
    group.output += event.output_tokens;
    group.cost += event.cost_usd || 0;
  }

  function dollars(value) {
    return value >= 0.01 ? value.toFixed(2) : value.toPrecision(2);
  }

  function renderCalls(root) {
    const groups = [...calls.values()].sort((a, b) => b.cost - a.cost || b.calls - a.calls);
    const rows = groups.map((group) => {
      const row = document.createElement("tr");
      row.dataset.route = group.route;
      row.dataset.deployment = group.deployment;
      row.append(
        cell("td", group.route),
        cell("td", group.deployment || "-"),
        cell("td", group.calls, "live-calls"),
        cell("td", group.errors, group.errors ? "live-failing" : ""),
        cell("td", Math.round(group.totalMs / group.calls)),
        cell("td", Math.round(group.lastMs)),
        cell("td", group.input),
        cell("td", group.cached),
        cell("td", group.output),
        cell("td", dollars(group.cost), "live-spend"),
      );
      return row;
    });
    root.querySelector("#live-calls tbody").replaceChildren(...rows);
    const sum = (field) => groups.reduce((total, group) => total + group[field], 0);
    root.querySelector("#live-calls-count").textContent = sum("calls");
    root.querySelector("#live-calls-errors").textContent = sum("errors");
    root.querySelector("#live-calls-spend").textContent = `$${dollars(sum("cost"))}`;
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

  function healthCell(source) {
    const state = health.get(`${source.route}/${source.name}`);
    const td = cell("td", "", "live-health");
    if (!state) return td;
    if (state.alert) {
      const badge = cell("span", ALERT_WORDS[state.alert] || state.alert, "live-alert");
      badge.dataset.alert = state.alert;
      badge.title = `last hour: ${state.requests} requests, ok ${state.ok_rate}, empty ${state.empty_rate}, failed ${state.failed_rate}, timeout ${state.timeout_rate}`;
      td.append(badge);
    } else {
      td.append(cell("span", "healthy", "live-healthy"));
    }
    return td;
  }

  function renderSources(tbody) {
    const rows = [...sources.values()].map((source) => {
      const row = document.createElement("tr");
      row.dataset.source = source.name;
      row.dataset.route = source.route;
      const alert = health.get(`${source.route}/${source.name}`)?.alert;
      if (alert) {
        row.dataset.alert = alert;
        row.className = "live-alerting";
      }
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
        healthCell(source),
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
    const span = windowSeconds();
    const now = Date.now() / 1000;
    const all = [...sources.values()].flatMap((source) => source.points);
    const newest = Math.max(now, ...all.map((p) => p.at));
    const first = span ? newest - span : Math.min(newest - 60, ...all.map((p) => p.at));
    const last = newest;
    const inWindow = (p) => p.at >= first && p.at <= last;
    const points = all.filter(inWindow);
    const left = CHART.left, bottom = CHART.height - CHART.bottom;
    const width = CHART.width - CHART.left - CHART.right, height = bottom - CHART.top;
    const axes = [
      svg("line", { x1: left, y1: CHART.top, x2: left, y2: bottom, stroke: "#999" }),
      svg("line", { x1: left, y1: bottom, x2: left + width, y2: bottom, stroke: "#999" }),
      svg("text", { x: left + width / 2, y: CHART.height - 4, "text-anchor": "middle",
                    class: "live-axis live-axis-title", id: "live-x-title" }, "time"),
      svg("text", { x: 14, y: CHART.top + height / 2, "text-anchor": "middle",
                    transform: `rotate(-90 14 ${CHART.top + height / 2})`,
                    class: "live-axis live-axis-title", id: "live-y-title" }, "latency (ms)"),
    ];
    const x = (at) => (left + ((at - first) / (last - first)) * width).toFixed(1);
    const clock = (at) => new Date(at * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    const xTicks = [];
    const xStep = TIME_STEPS.find((step) => step >= (last - first) / 6) || niceStep(last - first, 6);
    for (let at = Math.ceil(first / xStep) * xStep; at <= last; at += xStep) {
      xTicks.push(
        svg("line", { x1: x(at), y1: bottom, x2: x(at), y2: bottom + 4, stroke: "#999" }),
        svg("text", { x: x(at), y: bottom + 16, "text-anchor": "middle", class: "live-axis" }, clock(at)),
      );
    }
    if (!points.length) {
      const words = all.length ? "no resolves in this window" : "waiting for resolves";
      chart.replaceChildren(...axes, ...xTicks, svg("text", { x: left + 8, y: CHART.top + 16, class: "live-axis" }, words));
      return;
    }
    const yStep = niceStep(Math.max(0.05, ...points.map((p) => p.ms)) * 1.05, 4);
    const topMs = Math.ceil((Math.max(0.05, ...points.map((p) => p.ms)) * 1.05) / yStep) * yStep;
    const y = (ms) => (bottom - (ms / topMs) * height).toFixed(1);
    const yTicks = [];
    for (let ms = 0; ms <= topMs + yStep / 2; ms += yStep) {
      yTicks.push(
        svg("line", { x1: left, y1: y(ms), x2: left + width, y2: y(ms), stroke: "#e3e3e3" }),
        svg("text", { x: left - 6, y: Number(y(ms)) + 4, "text-anchor": "end", class: "live-axis" }, Number(ms.toPrecision(6))),
      );
    }
    const series = [...sources.values()].map((source) => {
      const name = source.name;
      const shown = source.points.filter(inWindow);
      const group = svg("g", { "data-source": name, "data-route": source.route, "data-color": source.color });
      const line = shown.map((p) => `${x(p.at)},${y(p.ms)}`).join(" ");
      group.append(svg("polyline", { points: line, fill: "none", stroke: source.color, "stroke-width": 1.5 }));
      for (const point of shown) {
        const fill = point.failed ? FAILURE_COLOR : source.color;
        const dot = svg("circle", { cx: x(point.at), cy: y(point.ms), r: point.failed ? 4 : 2.5, fill });
        dot.append(svg("title", {}, `${name}: ${point.ms} ms at ${clock(point.at)}${point.failed ? " (failed)" : ""}`));
        group.append(dot);
      }
      return group;
    });
    chart.replaceChildren(...yTicks, ...axes, ...xTicks, ...series);
  }

  function scheduleRender(root) {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(() => {
      renderQueued = false;
      renderChart(root.querySelector("#live-latency"));
      renderLegend(root.querySelector("#live-legend"));
      renderSources(root.querySelector("#live-sources tbody"));
      renderCalls(root);
    });
  }

  function takeHealth(rows) {
    health.clear();
    for (const row of rows) health.set(`${row.route}/${row.source}`, row);
  }

  async function refreshHealth(root) {
    try {
      const response = await fetch(root.dataset.healthPath, { credentials: "same-origin" });
      if (!response.ok) return;
      takeHealth((await response.json()).data || []);
      scheduleRender(root);
    } catch (error) {
      // the next refresh tries again
    }
  }

  function healthSoon(root) {
    if (healthQueued) return;
    healthQueued = true;
    setTimeout(() => {
      healthQueued = false;
      refreshHealth(root);
    }, HEALTH_AFTER_EVENTS_MS);
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
      if (event.kind === "call") {
        recordCall(event);
        scheduleRender(root);
        return;
      }
      record(event);
      addEventRow(root.querySelector("#live-events tbody"), event);
      scheduleRender(root);
      healthSoon(root);
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
    takeHealth(JSON.parse(document.getElementById("live-health")?.textContent || "[]"));
    for (const event of history) {
      if (event.kind === "call") {
        recordCall(event);
        continue;
      }
      record(event);
      addEventRow(events, event);
    }
    renderChart(root.querySelector("#live-latency"));
    if (history.length) scheduleRender(root);
    document.getElementById("live-window")?.addEventListener("change", () => scheduleRender(root));
    setInterval(() => renderChart(root.querySelector("#live-latency")), SLIDE_MS);
    setInterval(() => refreshHealth(root), HEALTH_REFRESH_MS);
    connect(root, 1000);
  });
})();
