// Upload: files into an index (POST /index/files: parsed and indexed in the request) or into a vector store
// (POST /v1/files, then attached: ingested in the background, polled). One row per file: its upload
// progress, then its ingestion status and, when it failed, the engine's reason.

import { api, upload } from "./api.js";
import { $, clear, h, bytes, number } from "./dom.js";

const POLL_MS = 500;
let state;

export function init(s) {
  state = s;
  for (const radio of document.querySelectorAll('input[name="upload-target"]')) radio.addEventListener("change", target);
  $("#upload-form").addEventListener("submit", (e) => {
    e.preventDefault();
    send();
  });
}

const intoStore = () => document.querySelector('input[name="upload-target"]:checked').value === "store";

export async function show() {
  if (!$("#upload-index").value && state.index) $("#upload-index").value = state.index;
  clear($("#upload-index-names"), (state.who?.indexes || []).map((name) => h("option", { value: name })));
  target();
}

async function target() {
  const store = intoStore();
  $("#upload-index-label").hidden = store;
  $("#upload-index").required = !store;
  $("#upload-store-label").hidden = !store;
  if (!store) return;
  try {
    const stores = await api("v1/vector_stores", { query: { limit: 100 } });
    clear($("#upload-store"), stores.data.map((s) => h("option", { value: s.id }, s.name && s.name !== s.id ? `${s.name} (${s.id})` : s.id)));
  } catch (err) {
    clear($("#upload-store"), h("option", { value: "" }, `(the vector stores could not be listed: ${err.message})`));
  }
}

function row(file) {
  const bar = h("progress", { max: 1, value: 0 });
  const status = h("td", { class: "file-status" }, "waiting");
  const tr = h("tr", {}, h("td", {}, file.name), h("td", {}, bytes(file.size)), h("td", {}, bar), status);
  $("#upload-rows").append(tr);
  return {
    progress: (x) => { bar.value = x; status.textContent = `uploading ${Math.round(x * 100)}%`; },
    status: (text, kind = "") => { status.textContent = text; status.dataset.kind = kind; tr.dataset.kind = kind; },
    done: () => { bar.value = 1; },
  };
}

async function send() {
  const files = [...$("#upload-files").files];
  if (!files.length) return;
  const store = intoStore() ? $("#upload-store").value : null;
  const index = $("#upload-index").value.trim();
  if (intoStore() && !store) return;
  const rows = files.map(row);
  for (const [i, file] of files.entries()) {
    try {
      if (store) await intoVectorStore(file, store, rows[i]);
      else await intoIndex(file, index, rows[i]);
    } catch (err) {
      rows[i].status(`failed: ${err.message}`, "error");
    }
  }
  $("#upload-files").value = "";
  if (!store) await state.refreshIndexes(state.index ?? index).catch(() => {});
}

async function intoIndex(file, index, r) {
  const form = new FormData();
  form.append("index_name", index);
  form.append("files", file, file.name);
  const docs = await upload("index/files", form, r.progress);
  r.done();
  r.status(`indexed: ${number(docs.length)} document(s) in ${index}`, "ok");
}

async function intoVectorStore(file, store, r) {
  const form = new FormData();
  form.append("purpose", "assistants");
  form.append("file", file, file.name);
  const uploaded = await upload("v1/files", form, r.progress);
  r.done();
  if (uploaded.status === "error") return r.status(`failed: ${uploaded.status_details || "the engine cannot read it"}`, "error");
  r.status("ingesting…");
  const base = `v1/vector_stores/${encodeURIComponent(store)}/files`;
  let out = await api(base, { method: "POST", json: { file_id: uploaded.id } });
  while (out.status === "in_progress") {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    out = await api(`${base}/${encodeURIComponent(uploaded.id)}`);
  }
  if (out.status === "completed") r.status(`completed: in ${store}`, "ok");
  else r.status(`${out.status}${out.last_error ? `: ${out.last_error.message}` : ""}`, "error");
}
