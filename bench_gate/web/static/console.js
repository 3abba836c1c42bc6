// bench-gate console: countdowns, the live queue (SSE), the live panel, edit checks.
// Plain JavaScript, no build step, no network beyond this server.
"use strict";

function countdowns() {
  const now = Date.now();
  document.querySelectorAll(".countdown[data-expires]").forEach((el) => {
    const left = Math.round((Date.parse(el.dataset.expires) - now) / 1000);
    if (left <= 0) { el.textContent = "expired"; el.classList.add("late"); return; }
    const m = Math.floor(left / 60), s = left % 60;
    el.textContent = (m >= 60 ? Math.floor(m / 60) + " h " + (m % 60) + " min"
      : m + ":" + String(s).padStart(2, "0"));
    el.classList.toggle("late", left < 120);
  });
}

function beep() {
  try {
    const ctx = new (window.AudioContext || window.webkitAudioContext)();
    const osc = ctx.createOscillator();
    osc.frequency.value = 880;
    osc.connect(ctx.destination);
    osc.start();
    osc.stop(ctx.currentTime + 0.12);
  } catch (e) { /* sound is a courtesy */ }
}

const baseTitle = document.title;
function setCount(n) {
  const badge = document.getElementById("pending-count");
  if (badge) badge.textContent = n ? String(n) : "";
  document.title = (n ? "(" + n + ") " : "") + baseTitle;
}

async function refreshQueue(announce) {
  const body = document.getElementById("queue-rows");
  if (!body) return;
  const known = new Set([...body.querySelectorAll("tr.req")].map((r) => r.dataset.id));
  // The same page and order as shown (?sort=...&offset=...); the total comes in a header.
  const res = await fetch("/fragments/queue" + location.search, { credentials: "same-origin" });
  if (!res.ok) return;
  body.innerHTML = await res.text();
  const rows = [...body.querySelectorAll("tr.req")];
  const fresh = rows.filter((r) => !known.has(r.dataset.id));
  fresh.forEach((r) => r.classList.add("new"));
  const total = Number(res.headers.get("X-Total-Count") || rows.length);
  body.dataset.total = String(total);
  const shownTotal = document.getElementById("queue-total");
  if (shownTotal) shownTotal.textContent = String(total);
  const range = document.getElementById("queue-range");
  const offset = Number(body.dataset.offset || 0);
  if (range) range.textContent = rows.length ? (offset + 1) + "–" + (offset + rows.length) : "";
  setCount(total);
  if (announce && fresh.length) beep();
  countdowns();
}

function liveEvents() {
  const page = document.body.dataset.page;
  const es = new EventSource("/events");
  const dot = document.getElementById("live-dot");
  es.onopen = () => dot && dot.classList.add("on");
  es.onerror = () => dot && dot.classList.remove("on");
  es.addEventListener("request", (ev) => {
    const msg = JSON.parse(ev.data);
    if (page === "queue") refreshQueue(msg.status === "pending");
    const article = document.querySelector("article.request");
    if (article && article.dataset.id === msg.id) {
      // A new status, or a new proposal while still pending (another operator approved it
      // with an edit): what this page shows is no longer what would run.
      const edited = msg.proposalHash && article.dataset.hash !== msg.proposalHash;
      const banner = document.getElementById("changed-banner");
      if (banner && article.dataset.status !== msg.status) {
        banner.hidden = false;
        banner.firstChild.textContent = "This request is now " + msg.status + ". ";
      } else if (banner && edited) {
        banner.hidden = false;
        banner.firstChild.textContent = "This request was edited since the page loaded: " +
          "what it would run is not what this page shows. Nothing is approved from it. ";
      }
      const form = document.getElementById("approve-form");
      if (form && edited) { form.dataset.stale = "1"; form.dispatchEvent(new Event("change")); }
    }
  });
  // An agent's questions wait in the same queue as approvals.
  es.addEventListener("question", (ev) => {
    const msg = JSON.parse(ev.data);
    if (page === "queue") refreshQueue(msg.status === "open");
  });
  // A client gone, an envelope breach, a stop: said at the top of the page as it happens.
  es.addEventListener("alert", (ev) => {
    const msg = JSON.parse(ev.data);
    const main = document.querySelector("main");
    if (!main) return;
    const said = document.createElement("p");
    said.className = "flash error live-alert";
    said.setAttribute("role", "alert");
    said.dataset.alert = msg.alert || "";
    said.textContent = msg.reason || String(msg.alert || "alert").replace(/_/g, " ");
    main.prepend(said);
  });
}

function livePanel() {
  const panel = document.getElementById("panel");
  if (!panel) return;
  setInterval(async () => {
    const res = await fetch(panel.dataset.src, { credentials: "same-origin" });
    if (res.ok) panel.innerHTML = await res.text();
  }, 2000);
}

function approveForm() {
  const form = document.getElementById("approve-form");
  if (!form) return;
  const button = document.getElementById("approve-button");
  const error = document.getElementById("edit-error");
  const check = () => {
    const ticked = form.querySelectorAll("input[name=kind]:checked").length > 0;
    const problems = [];
    let edited = false;
    form.querySelectorAll("input[name^='edit:']").forEach((input) => {
      const v = Number(input.value);
      const bad = input.value.trim() === "" || Number.isNaN(v) ||
        v < Number(input.min) || v > Number(input.max);
      input.classList.toggle("bad", bad);
      if (bad) problems.push(input.dataset.label + " must be " + input.min + " to " +
        input.max + " " + input.dataset.unit);
      if (!bad && v !== Number(input.dataset.original)) edited = true;
    });
    if (error) { error.hidden = problems.length === 0; error.textContent = problems.join("; "); }
    button.disabled = !ticked || problems.length > 0 || form.dataset.stale === "1";
    button.textContent = edited ? "Approve ticked, with my changes" : "Approve ticked";
  };
  form.addEventListener("input", check);
  form.addEventListener("change", check);
  check();
}

document.addEventListener("DOMContentLoaded", () => {
  countdowns();
  setInterval(countdowns, 1000);
  if (document.querySelector("header nav")) liveEvents();
  const body = document.getElementById("queue-rows");
  if (body) setCount(Number(body.dataset.total || body.querySelectorAll("tr.req").length));
  livePanel();
  approveForm();
});
