// Evaluation (shown only when the engine serves GET /indexes/{name}/evaluations, /whoami's features): the
// last finished run's scores per index version, drawn as grouped bars, and the same numbers as a table.

import { api } from "./api.js";
import { $, clear, h, score } from "./dom.js";

const METRICS = 4;  // at most this many metrics drawn: a chart, not a spreadsheet
let state;

export function init(s) {
  state = s;
}

// The runs, whatever the list's envelope: {data: [...]}, {evaluations: [...]} or a bare list.
function runsOf(body) {
  const list = Array.isArray(body) ? body : body?.data ?? body?.evaluations ?? body?.runs ?? [];
  return list.filter((run) => run && typeof run === "object");
}

// Numeric metrics of a run, flattened one level ({retrieval: {"mrr@10": 0.5}} → "mrr@10").
function metricsOf(run) {
  const out = {};
  for (const [name, value] of Object.entries(run.metrics || {})) {
    if (typeof value === "number") out[name] = value;
    else if (value && typeof value === "object") {
      for (const [inner, x] of Object.entries(value)) if (typeof x === "number") out[inner] = x;
    }
  }
  return out;
}

export async function show() {
  const summary = $("#eval-summary");
  clear($("#eval-chart"));
  clear($("#eval-head"));
  clear($("#eval-rows"));
  if (!state.index) return (summary.textContent = "Choose an index first.");
  let runs;
  try {
    runs = runsOf(await api(`indexes/${encodeURIComponent(state.index)}/evaluations`));
  } catch (err) {
    return (summary.textContent = `The evaluations could not be read: ${err.message}`);
  }
  // The newest finished run of each version (a run without a status counts as finished).
  const byVersion = new Map();
  for (const run of runs) {
    const version = run.version ?? run.index_version;
    const finished = !run.status || ["completed", "succeeded", "done"].includes(run.status);
    if (version === undefined || !finished || !Object.keys(metricsOf(run)).length) continue;
    const at = run.finished_at ?? run.created_at ?? 0;
    if (!byVersion.has(version) || (byVersion.get(version).finished_at ?? byVersion.get(version).created_at ?? 0) <= at) {
      byVersion.set(version, run);
    }
  }
  const versions = [...byVersion.keys()].sort((a, b) => a - b);
  if (!versions.length) return (summary.textContent = `No finished evaluation of ${state.index} yet.`);
  const names = [...new Set(versions.flatMap((v) => Object.keys(metricsOf(byVersion.get(v)))))].slice(0, METRICS);
  summary.textContent = `${state.index}: ${versions.length} version(s) scored; the newest finished run of each.`;
  $("#eval-chart").append(chart(versions, names, (v, m) => metricsOf(byVersion.get(v))[m]));
  $("#eval-head").append(h("tr", {}, h("th", { scope: "col" }, "Version"), names.map((m) => h("th", { scope: "col" }, m))));
  $("#eval-rows").append(...versions.map((v) => h("tr", {}, h("td", {}, String(v)),
    names.map((m) => h("td", {}, score(metricsOf(byVersion.get(v))[m]))))));
}

// Grouped bars, one group per version, one bar per metric; scores in [0, 1]. Attributes only (no inline style).
function chart(versions, names, value) {
  const W = 640, H = 220, PAD = 30, bar = Math.max(6, Math.min(28, (W - 2 * PAD) / (versions.length * (names.length + 1))));
  const group = bar * (names.length + 1);
  const y = (x) => H - PAD - Math.max(0, Math.min(1, x)) * (H - 2 * PAD);
  const svg = h("svg:svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-label": `Scores per version: ${names.join(", ")}` });
  for (const tick of [0, 0.5, 1]) {
    svg.append(h("svg:line", { x1: PAD, x2: W - PAD, y1: y(tick), y2: y(tick), class: "grid" }),
      h("svg:text", { x: 2, y: y(tick) + 4, class: "axis" }, tick.toFixed(1)));
  }
  versions.forEach((v, i) => {
    const x0 = PAD + i * group + bar / 2;
    names.forEach((m, j) => {
      const x = value(v, m);
      if (typeof x !== "number") return;
      svg.append(h("svg:rect", { x: x0 + j * bar, y: y(x), width: bar - 2, height: H - PAD - y(x), class: `series s${j}` },
        h("svg:title", {}, `version ${v}, ${m}: ${score(x)}`)));
    });
    svg.append(h("svg:text", { x: x0, y: H - 10, class: "axis" }, `v${v}`));
  });
  const legend = h("p", { class: "legend" }, names.map((m, j) => h("span", { class: `key s${j}` }, m)));
  return h("div", {}, svg, legend);
}
