// The console's only script: served by the console itself (the page's
// Content-Security-Policy allows no other, and no inline script). It keeps
// the list of waiting calls and the log's tail current without a reload.
// Everything it inserts was rendered and escaped by the server.
"use strict";

(function () {
  const view = document.body.dataset.view;
  const baseTitle = document.title;

  async function getJson(path) {
    const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    if (!response.ok) {
      throw new Error(String(response.status));
    }
    return response.json();
  }

  // Waiting calls: the list on the waiting page, the count in every tab's title.
  async function pollWaiting() {
    try {
      const data = await getJson("/api/waiting");
      const box = document.getElementById("waiting");
      if (box) {
        document.title = data.title;
        // An edit being written is not wiped: the list is drawn again once
        // it is sent or closed.
        const editing = box.querySelector("details.edit[open]");
        if (data.ids !== box.dataset.ids && !editing) {
          box.innerHTML = data.html;
          box.dataset.ids = data.ids;
        }
      } else {
        document.title = data.count > 0 ? "(" + data.count + ") " + baseTitle : baseTitle;
      }
    } catch (_) {
      // The console stopped, or the session ended: try again later.
    }
    setTimeout(pollWaiting, 1000);
  }

  // The log's live tail: calls logged since the page was drawn, newest first.
  async function tailLog() {
    const rows = document.getElementById("log-rows");
    if (!rows) {
      return;
    }
    try {
      const query = new URLSearchParams({
        after: rows.dataset.after,
        server: rows.dataset.server,
        tool: rows.dataset.tool,
        verdict: rows.dataset.verdict,
      });
      const data = await getJson("/api/log?" + query.toString());
      if (data.html) {
        rows.insertAdjacentHTML("afterbegin", data.html);
      }
      rows.dataset.after = String(data.last);
    } catch (_) {
      // As above.
    }
    setTimeout(tailLog, 2000);
  }

  pollWaiting();
  if (view === "log") {
    tailLog();
  }
})();
