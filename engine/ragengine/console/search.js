// The search playground: /retrieve with explain, so each result shows its score against the chat threshold,
// its place in the dense and keyword lists and the fused score that ordered it: why the chunk came back.

import { apiWithHeaders } from "./api.js";
import { showChunk } from "./dialogs.js";
import { $, clear, h, place, score, sourceName } from "./dom.js";

let state;

export function init(s) {
  state = s;
  $("#search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    run();
  });
}

export function show() {}

const rank = (r) => (r === null || r === undefined ? "–" : `#${r}`);

async function run() {
  const explain = $("#search-explain");
  const rows = $("#search-rows");
  if (!state.index) return (explain.textContent = "Choose an index first.");
  const body = { index_name: state.index, query: $("#search-query").value, explain: true,
    max_node_count: Number($("#search-k").value) || 5 };
  const filters = $("#search-filters").value.trim();
  if (filters) {
    try {
      body.filters = JSON.parse(filters);
    } catch (err) {
      clear(rows);
      return (explain.textContent = `The filters are not JSON: ${err.message}`);
    }
  }
  explain.textContent = "Searching…";
  let out;
  let headers;
  try {
    ({ body: out, headers } = await apiWithHeaders("retrieve", { method: "POST", json: body }));
  } catch (err) {
    clear(rows);
    return (explain.textContent = `The search failed: ${err.message}`);
  }
  const x = out.explain;
  const threshold = x.similarity_threshold;
  const passing = out.results.filter((r) => r.score >= threshold).length;
  const version = headers.get("X-Index-Version");
  explain.textContent = [
    x.hybrid ? `Hybrid search: ${x.fusion} fusion, dense weight ${x.dense_weight}, ${x.candidates} candidates per list`
      : "Dense search only",
    x.reranked ? "reranked by a cross-encoder" : null,
    `chat threshold ${score(threshold, 2)}: ${passing} of ${out.count} result(s) would enter a chat answer's context`,
    version ? `served by version ${version} (${headers.get("X-Embedding-Model")})` : null,
  ].filter(Boolean).join(" · ");
  clear(rows, out.results.map((r, i) => {
    const below = r.score < threshold;
    const where = place(r.metadata);
    return h("tr", { class: below ? "below" : null },
      h("td", {}, String(i + 1)),
      h("td", {}, h("meter", { min: 0, max: 1, value: r.score, title: `score ${score(r.score)}` }), " ", score(r.score),
        below ? h("span", { class: "tag" }, "below threshold") : null),
      h("td", {}, rank(r.dense_rank)),
      h("td", {}, rank(r.sparse_rank)),
      h("td", {}, score(r.fused_score)),
      h("td", {},
        h("button", { type: "button", class: "link", onclick: () => showChunk(r, state.index) },
          sourceName(r) + (where ? ` (${where})` : "")),
        h("div", { class: "clip" }, r.text)));
  }));
  if (!out.results.length) rows.append(h("tr", {}, h("td", { colspan: 6 }, "No result.")));
}
