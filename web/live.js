// The live page: the sessions table, a Stop button per session wired through the browser
// module, and the selected session's stop timeline (the web twin of `turnwatch explain`).
import { createStopTracer } from "/web/turnwatch-stop.js";

// A server started with --token-file wants it on every POST: the page is opened as /#token=…
// (a fragment never leaves the browser, so the token is in no server's log).
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const auth = token ? { Authorization: `Bearer ${token}` } : {};
window.addEventListener("hashchange", () => location.reload()); // a token given later: start over
// ?flush_ms=N holds the page's batched events that long (the tests use it to leave the page
// with its idle still queued, for the unload beacon to carry).
const flushMs = Number(new URLSearchParams(location.search).get("flush_ms")) || undefined;
const tw = createStopTracer({ endpoint: "/v1/events", token, flushMs });
window.turnwatchStop = tw; // for a look from the console
const POLL_MS = 500;
const awaitingIdle = new Map(); // session → turn: clicked, idle not yet rendered
const stopToIdle = new Map(); // session → seconds, as the browser measured them
let selected = null;
let refreshing = null;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function ms(s) {
  return s == null ? "" : s < 1 ? `${(s * 1000).toFixed(0)} ms` : `${s.toFixed(2)} s`;
}

async function stop(session, turn, button) {
  // The click first: the module reads the clock and mints the trace before anything else.
  const { traceparent } = tw.stopClicked({ session, turn });
  awaitingIdle.set(session, turn);
  button.disabled = true;
  button.textContent = "Stopping…";
  try {
    const r = await fetch(`/api/sessions/${encodeURIComponent(session)}/stop`, {
      method: "POST",
      headers: { traceparent, ...auth },
    });
    // agent.abort returned: the turn is settled and the runtime cleared "processing". The UI
    // renders idle now, as a runtime's renderer that awaited the RPC does (ADR: the renderer
    // clears processing when abort returns), not at the next poll.
    const reply = await r.json().catch(() => ({}));
    if (!r.ok) {
      // Not stopped (no token, runtime unreachable…): say why, and let the user try again.
      awaitingIdle.delete(session);
      showError(`Stop ${session}: ${r.status} ${reply.error ?? ""}`);
    } else {
      showError(null);
      if (reply.receipt !== "stale") showIdle(session);
    }
  } catch (err) {
    awaitingIdle.delete(session);
    console.warn("turnwatch: stop", err);
  }
  if (refreshing) await refreshing; // a poll under way may have read the session before
  await refresh();
}

function showError(text) {
  const p = $("#error");
  p.hidden = !text;
  p.textContent = text ?? "";
}

function showIdle(session) {
  const tr = document.querySelector(`tr[data-session="${CSS.escape(session)}"]`);
  if (!tr) return;
  tr.dataset.state = "idle";
  const state = tr.querySelector(".state");
  state.className = "state state-idle";
  state.textContent = "idle";
  idleRendered([session]);
}

/** Idle is on screen once this frame is painted: that is the user's end of the stop. */
function idleRendered(sessions) {
  requestAnimationFrame(() =>
    setTimeout(() => {
      for (const session of sessions) {
        if (!awaitingIdle.has(session)) continue;
        const turn = awaitingIdle.get(session);
        const { stopToIdle: took } = tw.processingCleared({ session, turn });
        awaitingIdle.delete(session);
        stopToIdle.set(session, took);
        const tr = document.querySelector(`tr[data-session="${CSS.escape(session)}"]`);
        if (tr) {
          tr.querySelector(".stop-to-idle").textContent = ms(took);
          tr.querySelector("button.stop").textContent = "Stop";
        }
        document.body.dataset.lastIdle = JSON.stringify({ session, stopToIdle: took });
      }
    }, 0),
  );
}

// Pinned first, then what a finding holds (they need someone), then what runs, then idle.
const RANK = { pinned: 0, stopping: 2, processing: 3, unknown: 4, idle: 5 };
const rank = (s) => (s.state !== "pinned" && s.findings.length ? 1 : RANK[s.state] ?? 4);
const quiet = (s) => s.state === "idle" && !s.findings.length;
//: Idle sessions shown before the rest are folded behind "show all".
const IDLE_SHOWN = 20;
let showAllIdle = false;
let scrollToTimeline = false;

function actions(s) {
  const cell = el("td", { class: "actions" });
  if (s.stop_unavailable && s.state !== "idle") {
    // Stop cannot work for it: say why, instead of a button that answers 404.
    cell.append(el("span", { class: "no-stop", title: s.stop_unavailable }, `no Stop: ${s.stop_unavailable}`));
  } else if (s.state !== "idle" || awaitingIdle.has(s.session)) {
    // (An idle session has nothing to stop: no button, not a disabled one, which would also
    // swallow a click meant for its row.)
    const stoppable = s.state !== "idle" && !awaitingIdle.has(s.session);
    const button = el("button", { class: "stop", disabled: !stoppable, "data-session": s.session, "data-turn": s.turn ?? "" }, stoppable || !awaitingIdle.has(s.session) ? "Stop" : "Stopping…");
    button.addEventListener("click", (e) => {
      e.stopPropagation();
      // The turn drawn on the button: a button kept over polls (keep) stops what it shows.
      stop(s.session, button.dataset.turn || null, button);
    });
    cell.append(button);
  }
  if (s.recoverable) {
    const rb = el("button", { class: "recover", "data-session": s.session }, "Recover");
    rb.addEventListener("click", (e) => {
      e.stopPropagation();
      recover(s.session, rb);
    });
    cell.append(" ", rb);
  }
  return cell;
}

async function postRecover(session, confirm) {
  const r = await fetch(`/api/sessions/${encodeURIComponent(session)}/recover`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...auth },
    body: JSON.stringify({ confirm }),
  });
  const reply = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${r.status} ${reply.error ?? ""}`);
  return reply;
}

/** The CLI's recovery: its plan listed, asked, then done; each action's result said. */
async function recover(session, button) {
  button.disabled = true;
  try {
    const plan = await postRecover(session, false);
    if (!plan.actions.length) {
      showNotice(plan.verdict);
      return;
    }
    const lines = plan.actions.map((a) => `• ${a.finding}: would ${a.action}${a.detail ? ` (${a.detail})` : ""}`);
    if (!window.confirm(`Recover ${session}?\n\n${lines.join("\n")}`)) return;
    button.textContent = "Recovering…";
    const done = await postRecover(session, true);
    showNotice(`Recovered ${session}: ` + done.actions.map((a) => `${a.finding}: ${a.action} → ${a.result}`).join("; "));
    showError(null);
  } catch (err) {
    showError(`Recover ${session}: ${err.message}`);
  } finally {
    button.disabled = false;
    button.textContent = "Recover";
    await refresh();
  }
}

function showNotice(text) {
  const p = $("#notice");
  p.hidden = !text;
  p.textContent = text ?? "";
  document.body.dataset.notice = text ?? "";
}

function row(s) {
  // Running only once begun: a call waiting for its user's answer has no process to look for.
  const count = (phase) => s.calls.filter((c) => c.phase === phase).length;
  const held = [
    [count("running"), "running"],
    [count("awaiting_permission"), "awaiting permission"],
  ].filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`);
  const tr = el(
    "tr",
    { "data-session": s.session, "data-state": s.state, class: s.session === selected ? "selected" : "" },
    el("td", { class: "id" }, s.session),
    el("td", {}, el("span", { class: `state state-${s.state}` }, s.state)),
    actions(s),
    // The server's reading (`since_ago`): its clock, not this browser's, wrote the times.
    el("td", { class: "col-since", title: s.since == null ? "" : new Date(s.since * 1000).toISOString() }, s.since_ago),
    el("td", { class: "id col-turn" }, s.turn ?? ""),
    el("td", { class: "col-mode" }, s.mode ?? s.source ?? ""),
    el("td", { class: "col-calls" }, held.length ? `${held.join(", ")} of ${s.calls.length}` : `${s.calls.length}`),
    el("td", {}, s.findings.join(", ")),
    el("td", { class: "stop-to-idle" }, ms(stopToIdle.get(s.session))),
  );
  tr.addEventListener("click", () => {
    selected = s.session;
    scrollToTimeline = true; // a row clicked brings its timeline into view
    for (const r of document.querySelectorAll("#sessions tbody tr[data-session]")) {
      r.classList.toggle("selected", r.dataset.session === selected);
    }
    showTimeline(selected); // at once, not after a poll already under way
  });
  return tr;
}

// The row drawn at the poll before, brought up to date in place, or the new one. A row stays
// the same element over polls, never taken out while it keeps its place, and so do its cells and
// the buttons of a cell drawn the same as before (a changed cell keeps its element and takes the
// new content): text selected in the table (a session id being copied) stays selected over
// polls, and a press that outlasts PRESS_HOLD_MS still ends on the element it began on unless
// that changed or moved.
function keep(prev, next) {
  if (!prev || prev.cells.length !== next.cells.length) return next;
  same(prev, next);
  [...next.cells].forEach((cell, i) => {
    const old = prev.cells[i];
    if (old.outerHTML === cell.outerHTML) return;
    same(old, cell);
    old.replaceChildren(...cell.childNodes);
  });
  return prev;
}

// ``node``'s attributes made ``like``'s.
function same(node, like) {
  for (const a of node.getAttributeNames()) if (!like.hasAttribute(a)) node.removeAttribute(a);
  for (const a of like.getAttributeNames()) node.setAttribute(a, like.getAttribute(a));
}

// ``body``'s children made ``rows``, in order, touching only what moved, came or went.
function place(body, rows) {
  rows.forEach((r, i) => {
    if (body.children[i] !== r) body.insertBefore(r, body.children[i] ?? null);
  });
  while (body.children.length > rows.length) body.lastElementChild.remove();
}

function matches(s, q) {
  if (!q) return true;
  return [s.session, s.turn, s.mode, s.source, s.state, ...s.findings].some((v) => v && String(v).toLowerCase().includes(q));
}

// A press on the table holds its redraw until the release (at most PRESS_HOLD_MS): chromium
// sends no click when the element pressed left the page before the release, and a poll may
// move a row (another session's state changed its place) or redraw a cell under the pointer.
const PRESS_HOLD_MS = 5000;
let pressedAt = null;
let heldSessions = null; // what a poll brought during the press, drawn after the click
$("#sessions").addEventListener("pointerdown", () => {
  pressedAt = Date.now();
});
for (const type of ["pointerup", "pointercancel"]) {
  document.addEventListener(type, () => {
    if (pressedAt === null) return;
    pressedAt = null;
    const all = heldSessions;
    heldSessions = null;
    if (all) setTimeout(() => renderSessions(all), 0); // after the click this release makes
  });
}

function renderSessions(all) {
  if (pressedAt !== null && Date.now() - pressedAt < PRESS_HOLD_MS) {
    heldSessions = all;
    return;
  }
  const q = $("#filter").value.trim().toLowerCase();
  const sorted = all
    .map((s, i) => [s, i])
    .sort(([a, i], [b, j]) => rank(a) - rank(b) || i - j)
    .map(([s]) => s)
    .filter((s) => matches(s, q));
  const idle = sorted.filter(quiet);
  const folded = !showAllIdle && !q && idle.length > IDLE_SHOWN ? idle.length - IDLE_SHOWN : 0;
  const hidden = new Set(folded ? idle.slice(IDLE_SHOWN).map((s) => s.session) : []);
  const shown = sorted.filter((s) => !hidden.has(s.session) || s.session === selected);
  const body = $("#sessions tbody");
  const before = new Map([...body.rows].map((r) => [r.dataset.session ?? r.className, r]));
  const rows = shown.map((s) => keep(before.get(s.session), row(s)));
  if (folded) {
    const more = el("button", { class: "more", id: "show-idle" }, `show ${folded} more idle session(s)`);
    more.addEventListener("click", () => {
      showAllIdle = true;
      refresh();
    });
    rows.push(keep(before.get("fold"), el("tr", { class: "fold" }, el("td", { colSpan: 9 }, more))));
  }
  place(body, rows);
  $("#empty").hidden = all.length > 0;
  $("#status").textContent = `${all.length} session(s)${q ? `, ${sorted.length} matching` : ""} · updated ${new Date().toLocaleTimeString()}`;
  const idleNow = all.filter((s) => s.state === "idle" && awaitingIdle.has(s.session));
  if (idleNow.length) idleRendered(idleNow.map((s) => s.session)); // stopped from elsewhere too
}

function renderTimeline(ex) {
  $("#timeline").hidden = false;
  $("#tl-session").textContent = `${ex.session} · ${ex.turn}`;
  $("#tl-summary").textContent = `mode ${ex.mode} · ${ex.state}` + (ex.source ? ` · written by ${ex.source}` : "");
  $("#tl-steps").replaceChildren(
    ...ex.steps.map(([off, label, detail]) =>
      el("li", {}, el("span", { class: "off" }, `${off < 0 ? "−" : "+"}${Math.abs(off).toFixed(3)} s`), label, detail ? ` — ${detail}` : ""),
    ),
  );
  const total = Math.max(ex.total, 0.001);
  $("#tl-tools tbody").replaceChildren(
    ...ex.tools.map((t) => {
      const bar = el("div", { class: "bar" });
      const from = Math.max(0, t.start ?? 0);
      const to = t.end ?? total;
      const run = el("span", { class: "run" });
      run.style.left = `${(100 * from) / total}%`;
      run.style.width = `${Math.max(0.5, (100 * (to - from)) / total)}%`;
      bar.append(run);
      if (t.abort != null) {
        const ab = el("span", { class: "abort" });
        ab.style.left = `${(100 * Math.max(0, t.abort)) / total}%`;
        ab.style.width = `${Math.max(0.5, (100 * (to - t.abort)) / total)}%`;
        bar.append(ab);
      }
      return el("tr", {}, el("td", {}, t.call), el("td", {}, t.tool), el("td", {}, t.tool_class), el("td", {}, t.policy), el("td", {}, t.outcome), el("td", {}, bar));
    }),
  );
  renderArc(ex.arc);
  $("#tl-reasons").replaceChildren(...ex.reasons.map((r) => el("li", {}, r)));
  // What the CLI says next: the command to copy, or that there is nothing to recover yet.
  $("#tl-verdict").hidden = !ex.verdict || !ex.reasons.length;
  $("#tl-verdict").replaceChildren(ex.recoverable ? el("code", {}, ex.verdict) : ex.verdict);
  if (scrollToTimeline) {
    scrollToTimeline = false;
    $("#timeline").scrollIntoView({ block: "start" });
  }
}

// The session's states as its user lived them (the arc `turnwatch explain` draws): the last
// ARC_SHOWN, each with when it began and the event that moved it, an inferred one marked.
const ARC_SHOWN = 12;
function renderArc(arc) {
  const steps = arc ? arc.steps : [];
  $("#tl-arc-head").hidden = $("#tl-arc").hidden = steps.length === 0;
  if (!steps.length) return;
  $("#tl-arc-stops").textContent = `${arc.stops} stop${arc.stops === 1 ? "" : "s"}`;
  const shown = steps.slice(-ARC_SHOWN);
  const items = shown.map((s) =>
    el(
      "li",
      { "data-state": s.state },
      el("span", { class: "off" }, new Date(s.since * 1000).toLocaleTimeString()),
      el("span", { class: `state-${s.state}` }, s.state),
      ` — ${s.event}` + (s.inferred ? ` (inferred: ${s.inferred})` : ""),
    ),
  );
  if (arc.cut || shown.length < steps.length) items.unshift(el("li", { class: "muted" }, "earlier states left out"));
  $("#tl-arc").replaceChildren(...items);
}

// The session's timeline, drawn only if it is still the one selected when it arrives (a slow
// answer for a row clicked away from must not replace the new one's).
async function showTimeline(session) {
  try {
    const r = await fetch(`/api/sessions/${encodeURIComponent(session)}/timeline`);
    if (!r.ok) return;
    const ex = await r.json();
    if (session === selected) renderTimeline(ex);
  } catch (err) {
    $("#status").textContent = `cannot reach turnwatch: ${err}`;
  }
}

async function refresh() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const sessions = await (await fetch("/api/sessions")).json();
      if (selected === null && sessions.length) selected = sessions[0].session;
      renderSessions(sessions);
      if (selected !== null) await showTimeline(selected);
    } catch (err) {
      $("#status").textContent = `cannot reach turnwatch: ${err}`;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

$("#filter").addEventListener("input", () => refresh());
refresh();
setInterval(refresh, POLL_MS);
