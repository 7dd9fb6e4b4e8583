// DOM helpers. Text goes in as text: h() sets strings with textContent (via text nodes), never innerHTML, so a
// document or an answer that holds markup shows the markup instead of running it.

export function h(tag, props = {}, ...children) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (/html/i.test(key)) throw new Error(`h(): ${key} is not allowed: text is set as text`);
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.setAttribute("class", value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key in node && !tag.startsWith("svg:")) node[key] = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function number(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en");
}

export function score(x, digits = 3) {
  return x === null || x === undefined ? "–" : Number(x).toFixed(digits);
}

export function when(seconds) {
  return seconds ? new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–";
}

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

// Where a chunk is in its document, from whatever its metadata holds: page(s), slide, sheet, heading path.
export function place(metadata = {}) {
  const parts = [];
  const pages = metadata.pages;
  if (Array.isArray(pages) && pages.length === 2 && pages[0] !== pages[1]) parts.push(`pp. ${pages[0]}–${pages[1]}`);
  else if (metadata.page !== undefined && metadata.page !== null) parts.push(`p. ${metadata.page}`);
  else if (Array.isArray(pages) && pages.length) parts.push(`p. ${pages[0]}`);
  if (metadata.slide !== undefined && metadata.slide !== null) parts.push(`slide ${metadata.slide}`);
  if (metadata.sheet) parts.push(`sheet ${metadata.sheet}`);
  if (Array.isArray(metadata.heading_path) && metadata.heading_path.length) parts.push(metadata.heading_path.join(" › "));
  return parts.join(", ");
}

export function sourceName(node) {
  const m = node.metadata || {};
  return m.filename || m.title || m.source || node.doc_id;
}

// A short, readable form of a metadata value (objects as compact JSON text).
export function shown(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

// A live message for screen readers and sighted users alike.
let fading;
export function announce(message, kind = "info") {
  const status = $("#status");
  status.dataset.kind = kind;
  status.textContent = message;
  clearTimeout(fading);
  if (kind !== "error") fading = setTimeout(() => { status.textContent = ""; }, 6000);
}
