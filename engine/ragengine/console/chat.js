// Chat: streamed answers from /v1/chat/completions on the chosen index, with their citations. What the
// engine did is shown as such: no document matched (no context), the LLM's fallback, a guardrail's action,
// and an answer cut off when the stream broke. Model output is text, always.

import { streamChat } from "./api.js";
import { showChunk } from "./dialogs.js";
import { $, append, clear, h, place, score, sourceName } from "./dom.js";

let state;
let history = [];
let running = null;

export function init(s) {
  state = s;
  $("#chat-form").addEventListener("submit", (e) => {
    e.preventDefault();
    ask();
  });
  $("#chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      ask();
    }
  });
  $("#chat-stop").addEventListener("click", () => running?.abort());
  $("#chat-new").addEventListener("click", reset);
}

export function show() {}

export function reset() {
  running?.abort();
  history = [];
  clear($("#chat-log"));
}

const GUARDRAIL_WORDS = { redact: "redacted", block: "blocked", unscreened: "not screened" };

function notice(box, text, kind = "info") {
  box.append(h("p", { class: `notice ${kind}` }, text));
}

async function ask() {
  const input = $("#chat-input");
  const question = input.value.trim();
  if (!question || running) return;
  if (!state.index) return notice($("#chat-log"), "Choose an index first.", "error");
  input.value = "";
  const log = $("#chat-log");
  log.append(h("article", { class: "msg user" }, h("div", { class: "text" }, question)));
  const text = h("div", { class: "text" });
  const notes = h("div", { class: "notes" });
  const cites = h("ol", { class: "citations" });
  const message = h("article", { class: "msg assistant", "aria-busy": "true" }, text, notes, cites);
  log.append(message);
  const index = state.index;
  history.push({ role: "user", content: question });
  running = new AbortController();
  $("#chat-send").disabled = true;
  $("#chat-stop").disabled = false;
  let answer = "";
  let sources = null;
  try {
    const result = await streamChat({ index_name: index, messages: history }, (event) => {
      if (event.error) return notice(notes, `The engine reported an error: ${event.error.message}`, "error");
      for (const choice of event.choices || []) {
        if (choice.index !== 0) continue;
        const delta = choice.delta?.content;
        if (delta) {
          answer += delta;
          text.textContent = answer;
        }
        if (choice.finish_reason === "content_filter") notice(notes, "Guardrails blocked the rest of this answer.", "warn");
        if (choice.finish_reason === "length") notice(notes, "The answer stopped at its length limit.", "warn");
      }
      if (event.generation_method === "extractive_fallback") {
        notice(notes, `The LLM did not answer${event.fallback_reason ? ` (${event.fallback_reason})` : ""}: these are the documents' best sentences.`, "warn");
      }
      if (event.generation_method === "no_context_refusal") noContext(notes);
      if (event.guardrails && event.guardrails.action !== "allow") {
        const scanners = (event.guardrails.scanners || []).map((s) => `${s.type} (${s.action}${s.count ? ` ×${s.count}` : ""})`);
        notice(notes, `Guardrails: ${GUARDRAIL_WORDS[event.guardrails.action] || event.guardrails.action}` +
          (scanners.length ? ` by ${scanners.join(", ")}` : "") + ".", "warn");
      }
      if (Array.isArray(event.source_nodes)) sources = event.source_nodes;
    }, { signal: running.signal, onHeaders: (headers) => {
      if (headers.get("X-RAG-Outcome") === "no_context") noContext(notes);
    } });
    if (!result.complete) {
      message.classList.add("cut");
      notice(notes, result.reason === "stopped" ? "Stopped." : `The answer was cut off: ${result.reason}.`, "error");
    }
  } catch (err) {
    message.classList.add("cut");
    notice(notes, `No answer: ${err.message}`, "error");
  } finally {
    running = null;
    message.removeAttribute("aria-busy");
    $("#chat-send").disabled = false;
    $("#chat-stop").disabled = true;
  }
  if (answer) history.push({ role: "assistant", content: answer });
  else history.pop();  // nothing came back: the question is asked again, not answered twice
  citations(cites, sources, index);
  input.focus();
}

function noContext(notes) {
  if (notes.querySelector(".no-context")) return;
  notes.append(h("p", { class: "notice warn no-context" },
    "No document matched this question closely enough: this answer is not based on the index."));
}

function citations(list, sources, index) {
  if (!sources || !sources.length) return;
  append(list, sources.map((node, i) => {
    const where = place(node.metadata);
    return h("li", {}, h("button", { type: "button", class: "link cite", onclick: () => showChunk(node, index) },
      `[${i + 1}] ${sourceName(node)}${where ? `, ${where}` : ""}`), h("span", { class: "hint" }, ` score ${score(node.score, 2)}`));
  }));
}
