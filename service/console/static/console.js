// The console's few lines of JavaScript: confirmations, and a job page that follows its job.
"use strict";

// Every form with data-confirm asks before it changes anything.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

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
      const response = await fetch(`/ui/jobs/${section.dataset.job}/status?wait=${wait}&tag=${encodeURIComponent(tag)}`,
                                   {credentials: "same-origin", headers: {Accept: "application/json"}});
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
