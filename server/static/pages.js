// Live updates for every page: listen to the server's event stream and re-render the page's
// [data-live] sections from the server when something they show changed. Pages work without
// it; it only saves reloading.
"use strict";

(function () {
  const body = document.body;
  const types = body.dataset.liveEvents;
  const experiment = body.dataset.liveExperiment ? Number(body.dataset.liveExperiment) : null;
  const everySeconds = Number(body.dataset.liveEvery || 0);
  const state = document.getElementById("live-state");
  const MIN_GAP_MS = 1000; // at most one refresh a second, however many events arrive

  function setState(name, text) {
    if (!state) return;
    state.dataset.state = name;
    state.textContent = text;
  }

  // The element that had focus, described so that its twin can be found in fresh markup.
  function focusKey() {
    const active = document.activeElement;
    if (!active || active === body || !active.closest("[data-live]")) return null;
    if (active.id) return "#" + CSS.escape(active.id);
    const href = active.getAttribute("href");
    return href ? 'a[href="' + CSS.escape(href) + '"]' : null;
  }

  // Replace every [data-live] section with its current version from the server.
  let refreshing = false;
  let again = false;
  let lastRefresh = 0;
  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    lastRefresh = Date.now();
    try {
      const response = await fetch(location.href, { headers: { Accept: "text/html" }, cache: "no-store" });
      if (!response.ok) throw new Error("HTTP " + response.status);
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const key = focusKey();
      for (const section of fresh.querySelectorAll("[data-live][id]")) {
        const current = document.getElementById(section.id);
        if (current) current.replaceWith(document.importNode(section, true));
      }
      if (key) document.querySelector(key)?.focus();
      document.dispatchEvent(new CustomEvent("live:refreshed"));
    } catch (error) {
      setState("error", "update failed, retrying");
      again = true;
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        schedule();
      }
    }
  }

  let timer = null;
  function schedule() {
    if (timer !== null) return;
    const wait = Math.max(0, lastRefresh + MIN_GAP_MS - Date.now());
    timer = setTimeout(() => {
      timer = null;
      refresh();
    }, wait);
  }

  function connect() {
    const source = new EventSource("/api/v1/events?types=" + encodeURIComponent(types));
    source.addEventListener("open", () => {
      // After a reconnect, events older than the server's buffer may be gone: catch up once.
      if (state && state.dataset.state === "reconnecting") schedule();
      setState("live", "live");
    });
    source.addEventListener("error", () => setState("reconnecting", "reconnecting…"));
    for (const type of types.split(",")) {
      source.addEventListener(type, (message) => {
        const data = JSON.parse(message.data);
        document.dispatchEvent(new CustomEvent("live:event", { detail: { type, data } }));
        if (type === "progress") return; // the page's own script draws progress
        if (experiment !== null && data.experiment_id !== experiment) return;
        schedule();
      });
    }
  }

  if (types) {
    connect();
    if (everySeconds > 0) setInterval(schedule, everySeconds * 1000);
  }
})();
