// The console's few lines of JavaScript: confirmations, and a job page that follows its job.
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

// The bar's width is set here, not in a style attribute: the Content-Security-Policy allows
// no inline style.
for (const bar of document.querySelectorAll("[data-percent]")) {
  bar.style.width = `${Number(bar.dataset.percent) || 0}%`;
}

const job = document.getElementById("job");
if (job && job.dataset.terminal === "false") {
  followJob(job);
}
