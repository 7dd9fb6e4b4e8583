// The console's entry: sign-in, the principal (GET /whoami), the sections and the index they work on.

import { ApiError, api, key, whenUnauthorized } from "./api.js";
import * as chat from "./chat.js";
import { $, announce, clear, h } from "./dom.js";
import * as evaluation from "./evaluation.js";
import * as indexes from "./indexes.js";
import * as search from "./search.js";
import * as upload from "./upload.js";

const VIEWS = { indexes, search, chat, upload, evaluation };
const ROLES = { read: 1, write: 2, admin: 3 };
// What every section reads: the principal and the chosen index. Sections never keep their own copy.
const state = { who: null, index: null, view: "indexes", can: () => false, refreshIndexes: null };

let initialised = false;
const authRequired = document.querySelector('meta[name="ragengine-auth"]')?.content === "required";

function showSignIn(message = "") {
  state.who = null;
  $("#app").hidden = true;
  $("#sign-out").hidden = true;
  $("#who").textContent = "";
  $("#signin").hidden = false;
  $("#signin-message").textContent = message;
  $("#signin-key").value = "";
  $("#signin-key").focus();
}

async function start() {
  let who;
  try {
    who = await api("whoami");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;  // whenUnauthorized showed the form
    return showSignIn(err.message);
  }
  state.who = who;
  state.can = (role) => ROLES[who.role] >= ROLES[role];
  $("#signin").hidden = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = !who.auth;
  $("#who").textContent = who.auth ? `${who.principal} · ${who.role}` : "access control off · admin";
  document.querySelector('[data-view="upload"]').hidden = !state.can("write");
  // Listing runs is the write role's (quality control, like a re-index): a reader would see only a 403.
  document.querySelector('[data-view="evaluation"]').hidden = !who.features.evaluations || !state.can("write");
  fillIndexes(who.indexes);
  if (!initialised) {  // once per page: signing in again must not add a second listener to every form
    for (const view of Object.values(VIEWS)) view.init?.(state);
    initialised = true;
  }
  show(state.view);
}

function fillIndexes(names, chosen = state.index) {
  const select = $("#index-select");
  state.index = names.includes(chosen) ? chosen : names[0] ?? null;
  clear(select, names.map((name) => h("option", { value: name, selected: name === state.index }, name)));
  select.disabled = !names.length;
}

// Re-read the indexes (after an upload created one, or a delete removed one).
state.refreshIndexes = async (chosen) => {
  const names = await api("indexes");
  if (state.who) state.who.indexes = names;
  fillIndexes(names, chosen);
  VIEWS[state.view].show?.(state);
};

function show(name) {
  state.view = name;
  for (const button of document.querySelectorAll(".tabs [data-view]")) {
    if (button.dataset.view === name) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  for (const [view, module] of Object.entries(VIEWS)) {
    $(`#view-${view}`).hidden = view !== name;
    if (view === name) module.show?.(state);
  }
}

function signOut(message = "") {
  key.clear();
  chat.reset();
  showSignIn(message);
}

whenUnauthorized(() => {
  const had = key.get();
  key.clear();
  if (state.who || had) signOut("Your key was refused: it is wrong, expired or revoked. Sign in again.");
  else showSignIn();
});

$("#signin-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const value = $("#signin-key").value.trim();
  if (!value) return;
  key.set(value);
  $("#signin-message").textContent = "Signing in…";
  await start();
});
$("#sign-out").addEventListener("click", () => signOut("Signed out."));
for (const button of document.querySelectorAll(".tabs [data-view]")) {
  button.addEventListener("click", () => show(button.dataset.view));
}
$("#index-select").addEventListener("change", (e) => {
  state.index = e.target.value;
  announce(`Index ${state.index}`);
  VIEWS[state.view].show?.(state);
});

// A signed-in tab (reloaded), or an engine without access control: straight in. Otherwise the form,
// without asking the API first (a request bound to fail would only add an error to the browser's log).
if (key.get() || !authRequired) start();
else showSignIn();
