// tether run viewer: live updates over SSE and the actions (approve, reject, cancel).
"use strict";
(function () {
  const KEY = "tether-viewer-token";
  const say = (text) => { const s = document.getElementById("status"); if (s) s.textContent = text; };

  function tokenForm() {
    const form = document.getElementById("token-form");
    if (!form) return;
    const input = form.querySelector("input");
    if (sessionStorage.getItem(KEY)) input.placeholder = "token set (for this tab)";
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (input.value) { sessionStorage.setItem(KEY, input.value); input.value = ""; input.placeholder = "token set (for this tab)"; say("Token set."); }
    });
  }

  function bindActions(root) {
    root.querySelectorAll("form[data-action]").forEach((form) => {
      form.addEventListener("submit", async (ev) => {
        ev.preventDefault();
        const button = ev.submitter;
        const url = (button && button.getAttribute("formaction")) || form.getAttribute("action");
        const body = new URLSearchParams(new FormData(form));
        const headers = { "content-type": "application/x-www-form-urlencoded" };
        const token = sessionStorage.getItem(KEY);
        if (token) headers["authorization"] = "Bearer " + token;
        const verb = (button && button.dataset.verb) || "action";
        say(verb + "…");
        let answer;
        try { answer = await fetch(url, { method: "POST", headers, body }); }
        catch (err) { say(verb + " failed: " + err); return; }
        const data = await answer.json().catch(() => ({}));
        if (answer.ok) { say(verb + ": " + (data.message || "done")); refresh(); }
        else { say(verb + " refused (" + answer.status + "): " + (data.error || answer.statusText)); }
      });
    });
  }

  let refreshing = false;
  async function refresh() {
    const run = document.getElementById("run");
    if (!run || refreshing) return;
    refreshing = true;
    try {
      const url = location.pathname.replace(/\/$/, "") + "/fragment";
      const answer = await fetch(url, { headers: { accept: "application/json" } });
      if (!answer.ok) return;
      const data = await answer.json();
      const head = document.getElementById("run-head");
      const focused = document.activeElement && head.contains(document.activeElement);
      head.innerHTML = data.head;
      document.getElementById("timeline").innerHTML = data.timeline;
      run.dataset.seen = String(data.events);
      run.dataset.status = data.status;
      bindActions(head);
      if (focused) head.querySelector("h1").setAttribute("tabindex", "-1"), head.querySelector("h1").focus();
    } finally { refreshing = false; }
  }

  function follow() {
    const run = document.getElementById("run");
    if (!run || !run.dataset.live || !window.EventSource) return;
    const source = new EventSource(run.dataset.live);
    source.onmessage = (ev) => {
      const news = JSON.parse(ev.data);
      if (String(news.events) !== run.dataset.seen || news.status !== run.dataset.status) refresh();
    };
    source.addEventListener("end", () => { source.close(); refresh(); });
  }

  document.addEventListener("DOMContentLoaded", () => { tokenForm(); bindActions(document); follow(); });
})();

// The list's column buttons sort the rows of the page shown (the linked columns sort
// every run, in the store).
(function () {
  function sortBy(button) {
    const table = button.closest("table");
    const body = table.tBodies[0];
    const key = button.dataset.sort;
    const numeric = button.hasAttribute("data-numeric");
    const th = button.closest("th");
    const ascending = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th[aria-sort]").forEach((other) => other.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const value = (row) => (key === "run" ? row.dataset.run : row.dataset[key] || "");
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      let x = value(a), y = value(b), order;
      if (numeric) {
        // Unknown values (—) sort last either way.
        if (x === "" || y === "") return (x === "") - (y === "");
        order = parseFloat(x) - parseFloat(y);
      } else {
        order = x.localeCompare(y);
      }
      return ascending ? order : -order;
    });
    rows.forEach((row) => body.appendChild(row));
    const status = document.getElementById("status");
    if (status) status.textContent = "Sorted by " + button.textContent + (ascending ? ", ascending" : ", descending");
  }
  document.addEventListener("click", (ev) => {
    const button = ev.target.closest && ev.target.closest("button.sort");
    if (button) sortBy(button);
  });
})();
