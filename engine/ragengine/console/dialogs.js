// The two dialogs: a confirmation before every admin action, and a chunk with its document (a citation or a
// search result). Native <dialog>s: modal, focus kept inside, Escape closes them.

import { api } from "./api.js";
import { $, clear, h, place, shown, sourceName } from "./dom.js";

// Resolves true when the user confirmed. With `typed`, the Confirm button waits until that text is typed.
export function confirmAction(text, { typed = null, action = "Confirm" } = {}) {
  const dialog = $("#confirm");
  const ok = $("#confirm-ok");
  const input = $("#confirm-typed");
  $("#confirm-text").textContent = text;
  ok.textContent = action;
  $("#confirm-typed-label").hidden = typed === null;
  $("#confirm-name").textContent = typed ?? "";
  input.value = "";
  ok.disabled = typed !== null;
  input.oninput = () => { ok.disabled = input.value !== typed; };
  return new Promise((resolve) => {
    const done = (answer) => {
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    ok.onclick = () => done(true);
    $("#confirm-cancel").onclick = () => done(false);
    dialog.onclose = () => done(false);  // Escape
    dialog.showModal();
    (typed !== null ? input : $("#confirm-cancel")).focus();
  });
}

const DOC_CHARS = 20_000;

// A chunk (a citation or a search hit), its place, its metadata, then its document's text from the API.
export async function showChunk(node, index) {
  const dialog = $("#chunk");
  $("#chunk-title").textContent = sourceName(node);
  $("#chunk-place").textContent = place(node.metadata) || "No page, slide or section recorded for this chunk.";
  $("#chunk-text").textContent = node.text ?? "";
  const meta = Object.entries(node.metadata || {}).filter(([k]) => k !== "acl");
  clear($("#chunk-meta"), meta.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, shown(v))]),
    h("dt", {}, "doc_id"), h("dd", {}, node.doc_id));
  const doc = $("#chunk-doc");
  doc.textContent = "Loading the document…";
  $("#chunk-close").onclick = () => dialog.close();
  dialog.showModal();
  $("#chunk-close").focus();
  try {
    const page = await api(`indexes/${encodeURIComponent(index)}/documents`,
      { query: { doc_id: node.doc_id, max_text_length: DOC_CHARS, limit: 1 } });
    const found = page.documents[0];
    if (!found) doc.textContent = "The document is no longer in the index.";
    else {
      doc.textContent = found.text;
      if (found.is_truncated) doc.append(h("p", { class: "hint" }, `(the first ${DOC_CHARS.toLocaleString("en")} characters)`));
    }
  } catch (err) {
    doc.textContent = `The document could not be loaded: ${err.message}`;
  }
}
