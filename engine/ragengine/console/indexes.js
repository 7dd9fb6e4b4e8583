// Indexes: the chosen index's documents (paged and searched by the engine), its versions, and the admin
// actions (re-index, roll back, export, delete; activate or drop a retired version), each confirmed first.

import { api, download } from "./api.js";
import { confirmAction, showChunk } from "./dialogs.js";
import { $, announce, clear, h, number, shown, when } from "./dom.js";

const PAGE = 20;
const PREVIEW = 240;
let state;
let offset = 0;
let total = 0;
let polling = null;

export function init(s) {
  state = s;
  $("#doc-search").addEventListener("submit", (e) => {
    e.preventDefault();
    offset = 0;
    loadDocuments();
  });
  $("#doc-prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); loadDocuments(); });
  $("#doc-next").addEventListener("click", () => { offset += PAGE; loadDocuments(); });
  $("#act-reindex").addEventListener("click", reindex);
  $("#act-rollback").addEventListener("click", rollback);
  $("#act-export").addEventListener("click", exportIndex);
  $("#act-delete").addEventListener("click", deleteIndex);
}

let shownIndex = null;
export function show() {
  $("#no-index").hidden = Boolean(state.index);
  if (state.index !== shownIndex) {
    offset = 0;
    $("#doc-search-text").value = "";
    shownIndex = state.index;
  }
  loadDocuments();
  loadVersions();
}

const path = (suffix = "") => `indexes/${encodeURIComponent(state.index)}${suffix}`;

async function loadDocuments() {
  const rows = $("#doc-rows");
  if (!state.index) {
    clear(rows);
    $("#doc-count").textContent = "";
    $("#doc-prev").disabled = $("#doc-next").disabled = true;
    return;
  }
  const search = $("#doc-search-text").value.trim();
  try {
    const page = await api(path("/documents"), { query: { limit: PAGE, offset, max_text_length: PREVIEW, search } });
    total = page.total_items;
    clear(rows, page.documents.map((doc) => h("tr", {},
      h("td", {}, h("button", { type: "button", class: "link", onclick: () => openDocument(doc) }, doc.doc_id)),
      h("td", { class: "clip" }, doc.text + (doc.is_truncated ? "…" : "")),
      h("td", { class: "clip" }, Object.entries(doc.metadata || {}).map(([k, v]) => `${k}: ${shown(v)}`).join(" · ")))));
    const last = Math.min(offset + page.count, total);
    $("#doc-count").textContent = total
      ? `${number(offset + 1)}–${number(last)} of ${number(total)} document(s)${search ? ` matching “${search}”` : ""}`
      : search ? `No document matches “${search}”.` : "This index holds no document.";
  } catch (err) {
    clear(rows);
    total = 0;
    $("#doc-count").textContent = `The documents could not be listed: ${err.message}`;
  }
  $("#doc-prev").disabled = offset === 0;
  $("#doc-next").disabled = offset + PAGE >= total;
}

function openDocument(doc) {
  showChunk({ doc_id: doc.doc_id, text: doc.text + (doc.is_truncated ? "…" : ""), metadata: doc.metadata || {} }, state.index);
}

async function loadVersions() {
  const box = $("#versions");
  clearTimeout(polling);
  box.hidden = !state.index || !state.can("write");  // the versions route needs the write role
  $("#admin-actions").hidden = !state.can("admin");
  if (box.hidden) return;
  let out;
  try {
    out = await api(path("/versions"));
  } catch (err) {
    $("#versions-summary").textContent = `The versions could not be read: ${err.message}`;
    clear($("#version-rows"));
    return;
  }
  const job = out.job;
  const running = job && job.state === "running";
  $("#versions-summary").textContent = [
    `Live: version ${out.live_version} (${out.embedding_model || "model unknown"})`,
    out.current === false ? "not the engine's current model" : null,
    job ? `${job.kind} of version ${job.version}: ${job.state}, ${number(job.documents_done)} of ${number(job.documents_total)} documents${job.message ? ` (${job.message})` : ""}` : null,
  ].filter(Boolean).join(" · ");
  const admin = state.can("admin");
  clear($("#version-rows"), out.versions.map((v) => h("tr", {},
    h("td", {}, String(v.version)),
    h("td", {}, h("span", { class: `state ${v.state}` }, v.state)),
    h("td", {}, v.embedding_model || "–"),
    h("td", {}, number(v.documents)),
    h("td", {}, number(v.chunks)),
    h("td", {}, when(v.created_at)),
    h("td", {}, admin && v.state === "retired" ? [
      h("button", { type: "button", onclick: () => activate(v.version) }, `Activate ${v.version}`),
      " ",
      h("button", { type: "button", class: "danger", onclick: () => dropVersion(v.version) }, `Delete ${v.version}`),
    ] : ""))));
  $("#act-rollback").disabled = !previous(out) || running;
  $("#act-reindex").disabled = running;
  box.dataset.previous = previous(out) ?? "";
  if (running) polling = setTimeout(loadVersions, 1000);
}

// The version a rollback brings back: the retired one that was live most recently.
function previous(out) {
  const retired = out.versions.filter((v) => v.state === "retired" && v.activated_at);
  retired.sort((a, b) => b.activated_at - a.activated_at);
  return retired[0]?.version ?? null;
}

async function act(confirmText, options, work, done) {
  if (!(await confirmAction(confirmText, options))) return announce("Cancelled.");
  try {
    const message = await work();
    announce(message, "ok");
  } catch (err) {
    announce(`Failed: ${err.message}`, "error");
  }
  await done?.();
}

function reindex() {
  const model = $("#reindex-model").value.trim();
  act(`Build a new version of “${state.index}” from its stored text${model ? ` with the model ${model}` : ""}? ` +
      "The live version keeps serving until the new one is complete.", { action: "Re-index" },
  async () => {
    const out = await api(path("/reindex"), { method: "POST", json: model ? { embedding_model: model } : {} });
    return `Re-index of ${state.index} started: version ${out.job?.version ?? "?"}.`;
  }, loadVersions);
}

function rollback() {
  const version = $("#versions").dataset.previous;
  act(`Make version ${version} of “${state.index}” live again? It first gets the writes it missed.`, { action: "Roll back" },
    async () => {
      await api(path(`/versions/${version}/activate`), { method: "POST" });
      return `Rolling back ${state.index} to version ${version}.`;
    }, loadVersions);
}

function activate(version) {
  act(`Make version ${version} of “${state.index}” live?`, { action: `Activate ${version}` }, async () => {
    await api(path(`/versions/${version}/activate`), { method: "POST" });
    return `Activating version ${version} of ${state.index}.`;
  }, loadVersions);
}

function dropVersion(version) {
  act(`Delete retired version ${version} of “${state.index}” and its data? It cannot be brought back.`,
    { action: `Delete ${version}` }, async () => {
      await api(path(`/versions/${version}`), { method: "DELETE" });
      return `Version ${version} of ${state.index} deleted.`;
    }, loadVersions);
}

function exportIndex() {
  act(`Export “${state.index}”? The file holds every document of the index, whatever its ACL.`, { action: "Export" },
    async () => {
      const size = await download(path("/export"), `${state.index}.ragx.gz`);
      return `Exported ${state.index} (${number(size)} bytes).`;
    });
}

function deleteIndex() {
  const name = state.index;
  act(`Delete the index “${name}” and all its files? This cannot be undone.`, { typed: name, action: "Delete index" },
    async () => {
      await api(path(), { method: "DELETE" });
      return `Index ${name} deleted.`;
    }, () => state.refreshIndexes());
}
