// The engine's API, as the signed-in principal. The key lives in this tab's sessionStorage only, and only
// ever travels in the Authorization header: never in a URL, a cookie or localStorage.

const KEY = "ragengine.key";
// The API's root, relative to the page (…/ui/ → …/): an Ingress serving the engine under a path prefix works.
export const ROOT = new URL("../", window.location.href);

export class ApiError extends Error {
  constructor(status, message, body = null) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export const key = {
  get: () => sessionStorage.getItem(KEY),
  set: (value) => sessionStorage.setItem(KEY, value),
  clear: () => sessionStorage.removeItem(KEY),
};

// Called with the ApiError when the engine refuses the key (401): the app goes back to its sign-in form.
let onUnauthorized = () => {};
export function whenUnauthorized(handler) {
  onUnauthorized = handler;
}

export function url(path, query = {}) {
  const out = new URL(path.replace(/^\//, ""), ROOT);
  for (const [name, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") out.searchParams.set(name, String(value));
  }
  return out;
}

function headers(extra = {}) {
  const value = key.get();
  return value ? { Authorization: `Bearer ${value}`, ...extra } : { ...extra };
}

// The error message of an engine answer in either of its shapes (KAITO's detail, OpenAI's error object).
export function messageOf(body, status) {
  if (body && typeof body === "object") {
    if (body.error && typeof body.error === "object" && body.error.message) return String(body.error.message);
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) return body.detail.map((d) => `${(d.loc || []).slice(1).join(".")}: ${d.msg}`).join("; ");
  }
  return `HTTP ${status}`;
}

async function failure(resp) {
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  const error = new ApiError(resp.status, messageOf(body, resp.status), body);
  if (resp.status === 401) onUnauthorized(error);
  return error;
}

async function send(path, { method = "GET", json, query, signal, accept } = {}) {
  const init = { method, headers: headers(accept ? { Accept: accept } : {}), signal, cache: "no-store" };
  if (json !== undefined) {
    init.body = JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  }
  let resp;
  try {
    resp = await fetch(url(path, query), init);
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "The engine did not answer (is it running, and reachable from this browser?).");
  }
  if (!resp.ok) throw await failure(resp);
  return resp;
}

export async function api(path, options = {}) {
  const resp = await send(path, options);
  return resp.status === 204 ? null : resp.json();
}

export async function apiWithHeaders(path, options = {}) {
  const resp = await send(path, options);
  return { body: await resp.json(), headers: resp.headers };
}

// A file the API streams (an export): fetched with the key, handed to the browser as a download.
export async function download(path, filename) {
  const resp = await send(path, { accept: "application/gzip" });
  const blob = await resp.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  return blob.size;
}

// A multipart upload with progress (fetch cannot report upload progress; XMLHttpRequest can).
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url(path));
    for (const [name, value] of Object.entries(headers())) xhr.setRequestHeader(name, value);
    xhr.responseType = "json";
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) return resolve(xhr.response);
      const error = new ApiError(xhr.status, messageOf(xhr.response, xhr.status), xhr.response);
      if (xhr.status === 401) onUnauthorized(error);
      reject(error);
    };
    xhr.onerror = () => reject(new ApiError(0, "The upload was cut off: the engine did not answer."));
    xhr.send(form);
  });
}

// No bytes for this long while an answer streams: the engine (or the network) is gone; stop waiting.
export const STALL_MS = 60_000;

// POST a streaming chat completion and hand each SSE payload to onEvent as it arrives. Resolves with
// {complete: true} after [DONE], or {complete: false, reason} when the stream was cut off; never hangs
// past STALL_MS of silence. Rejects with ApiError when the engine refused the request (a 4xx/5xx).
export async function streamChat(body, onEvent, { signal, onHeaders } = {}) {
  const stop = new AbortController();
  const abort = () => stop.abort();
  signal?.addEventListener("abort", abort);
  let timer;
  const stalled = () => {
    clearTimeout(timer);
    timer = setTimeout(() => stop.abort(new Error("stalled")), STALL_MS);
  };
  try {
    stalled();
    let resp;
    try {
      resp = await fetch(url("v1/chat/completions"), {
        method: "POST", headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify({ ...body, stream: true }), signal: stop.signal, cache: "no-store",
      });
    } catch (err) {
      if (signal?.aborted) return { complete: false, reason: "stopped" };
      throw new ApiError(0, "The engine did not answer (is it running, and reachable from this browser?).");
    }
    if (!resp.ok) throw await failure(resp);
    onHeaders?.(resp.headers);
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch {
        if (signal?.aborted) return { complete: false, reason: "stopped" };
        if (stop.signal.aborted) return { complete: false, reason: `no data from the engine for ${STALL_MS / 1000} s` };
        return { complete: false, reason: "the connection to the engine was lost" };
      }
      if (chunk.done) return { complete: false, reason: "the engine closed the stream before the end" };
      stalled();
      buffer += decoder.decode(chunk.value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data:")) continue;  // ": keep-alive" comments and the like
          const data = line.slice(5).trim();
          if (data === "[DONE]") {
            reader.cancel().catch(() => {});
            return { complete: true };
          }
          try {
            onEvent(JSON.parse(data));
          } catch (err) {
            if (err instanceof SyntaxError) continue;  // not JSON: not ours to show
            throw err;
          }
        }
      }
    }
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", abort);
  }
}
