// The console's few lines of JavaScript: confirmations, a job page that follows its job, lists
// that refresh themselves, and a notice when the session ends. Every page works without it.
"use strict";

// Every form with data-confirm asks before it changes anything.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// What every script request of a page sends: JSON wanted, and the page it is for (so that a
// lost session's login comes back here).
function consoleFetch(url) {
  return fetch(url, {credentials: "same-origin",
                     headers: {Accept: "application/json", "X-Jobq-Page": location.pathname + location.search}});
}

// The session ended (logout elsewhere, a revoked token, the idle timeout): say so, offer the
// login, and stop refreshing what can no longer be read.
function sessionLost(loginUrl) {
  if (document.getElementById("session-lost")) {
    return;
  }
  const banner = document.createElement("div");
  banner.id = "session-lost";
  banner.className = "banner";
  banner.setAttribute("role", "alert");
  banner.append("Your session has ended: what this page shows is no longer updated. ");
  const link = document.createElement("a");
  link.href = loginUrl;
  link.textContent = "Log in again";
  banner.append(link);
  document.body.prepend(banner);
}

// A job page long-polls its job (the API's ?wait= machinery) and moves the bar without a
// reload; once the job ends, the page reloads once to show its attempts and result.
function followJob(section) {
  const bar = document.getElementById("bar");
  const state = document.getElementById("state");
  const text = document.getElementById("progress-text");
  const progress = bar.parentElement;
  let tag = section.dataset.tag;
  const wait = Math.min(25, Number(section.dataset.maxWait) || 25);
  const poll = async () => {
    let answer;
    try {
      const response = await consoleFetch(`/ui/jobs/${section.dataset.job}/status?wait=${wait}&tag=${encodeURIComponent(tag)}`);
      if (response.status === 401) {
        sessionLost((await response.json()).login);
        return;
      }
      if (!response.ok) {
        setTimeout(poll, 5000);
        return;
      }
      answer = await response.json();
    } catch (error) {
      setTimeout(poll, 5000);  // the server is restarting: try again shortly
      return;
    }
    tag = answer.tag;
    const pct = answer.percent === null ? 0 : answer.percent;
    bar.style.width = `${pct}%`;
    progress.setAttribute("aria-valuenow", String(pct));
    text.textContent = answer.total === null ? `${answer.done}` : `${answer.done} / ${answer.total}`;
    state.textContent = answer.state;
    state.className = `state ${answer.state}`;
    document.getElementById("stale").hidden = !answer.stale;
    document.getElementById("cancel-requested").hidden = !answer.cancel_requested;
    if (["succeeded", "failed", "cancelled"].includes(answer.state)) {
      window.location.reload();
      return;
    }
    poll();
  };
  poll();
}

// What a page (or a refreshed part of it) needs once it is in the document:
// - the bars' widths, set here and not in a style attribute (the Content-Security-Policy
//   allows no inline style);
// - each table cell named by its column (data-label), for the narrow layout where a table
//   becomes a list of cards (console.css).
function dress(root) {
  for (const bar of root.querySelectorAll("[data-percent]")) {
    bar.style.width = `${Number(bar.dataset.percent) || 0}%`;
  }
  for (const table of root.querySelectorAll(".scroll table")) {
    const names = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.children).forEach((cell, index) => {
        if (names[index] !== undefined && cell.colSpan === 1) {
          cell.dataset.label = names[index];
        }
      });
    }
  }
}
dress(document);

// Live refresh: a page whose parts carry data-live (the overview, the lists, failures,
// workers) reads its own URL again every few seconds and swaps those parts in place: no
// reload, the filters (in the URL and in the form, which is not swapped) kept. Paused while
// the tab is hidden; the header's "Live" box turns it off (remembered in this browser).
function liveRefresh() {
  const parts = document.querySelectorAll("[data-live]");
  const toggle = document.getElementById("live-toggle");
  if (!parts.length || !toggle) {
    return;
  }
  toggle.closest("label").hidden = false;
  toggle.checked = localStorage.getItem("jobq-live") !== "off";
  const seconds = Number(document.body.dataset.liveSeconds) || 5;
  let timer = null;
  const schedule = () => {
    clearTimeout(timer);
    if (toggle.checked && document.visibilityState === "visible") {
      timer = setTimeout(refresh, seconds * 1000);
    }
  };
  const refresh = async () => {
    try {
      const response = await fetch(location.href, {credentials: "same-origin",
        headers: {Accept: "text/html", "X-Jobq-Page": location.pathname + location.search}});
      if (response.status === 401) {
        sessionLost((await response.json()).login);
        return;  // nothing more to read
      }
      if (response.ok) {
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        for (const part of document.querySelectorAll("[data-live]")) {
          const replacement = fresh.getElementById(part.id);
          if (replacement) {
            part.innerHTML = replacement.innerHTML;
            dress(part);
          }
        }
        document.body.dataset.refreshed = String(Date.now());
      }
    } catch (error) {
      // the server is restarting: the next round tries again
    }
    schedule();
  };
  toggle.addEventListener("change", () => {
    localStorage.setItem("jobq-live", toggle.checked ? "on" : "off");
    if (toggle.checked) {
      refresh();
    } else {
      clearTimeout(timer);
    }
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && toggle.checked) {
      refresh();  // back in sight: catch up at once
    } else {
      clearTimeout(timer);
    }
  });
  schedule();
}
liveRefresh();

const job = document.getElementById("job");
if (job && job.dataset.terminal === "false") {
  followJob(job);
}
