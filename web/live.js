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

function ago(ts) {
  if (ts == null) return "";
  const s = Math.max(0, Date.now() / 1000 - ts);
  return s < 60 ? `${s.toFixed(0)} s ago` : `${(s / 60).toFixed(0)} min ago`;
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

function row(s) {
  const stoppable = s.state !== "idle" && !awaitingIdle.has(s.session);
  const button = el("button", { class: "stop", disabled: !stoppable, "data-session": s.session }, stoppable || !awaitingIdle.has(s.session) ? "Stop" : "Stopping…");
  button.addEventListener("click", (e) => {
    e.stopPropagation();
    stop(s.session, s.turn, button);
  });
  const running = s.calls.filter((c) => c.open).length;
  const tr = el(
    "tr",
    { "data-session": s.session, "data-state": s.state, class: s.session === selected ? "selected" : "" },
    el("td", {}, s.session),
    el("td", {}, el("span", { class: `state state-${s.state}` }, s.state)),
    el("td", {}, ago(s.since)),
    el("td", {}, s.turn ?? ""),
    el("td", {}, s.mode ?? s.source ?? ""),
    el("td", {}, running ? `${running} running of ${s.calls.length}` : `${s.calls.length}`),
    el("td", {}, s.findings.join(", ")),
    el("td", { class: "stop-to-idle" }, ms(stopToIdle.get(s.session))),
    el("td", {}, button),
  );
  tr.addEventListener("click", () => {
    selected = s.session;
    refresh();
  });
  return tr;
}

function renderSessions(sessions) {
  const body = $("#sessions tbody");
  body.replaceChildren(...sessions.map(row));
  $("#empty").hidden = sessions.length > 0;
  $("#status").textContent = `${sessions.length} session(s) · updated ${new Date().toLocaleTimeString()}`;
  const idle = sessions.filter((s) => s.state === "idle" && awaitingIdle.has(s.session));
  if (idle.length) idleRendered(idle.map((s) => s.session)); // stopped from elsewhere too
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
  $("#tl-reasons").replaceChildren(...ex.reasons.map((r) => el("li", {}, r)));
}

async function refresh() {
  if (refreshing) return refreshing;
  refreshing = (async () => {
    try {
      const sessions = await (await fetch("/api/sessions")).json();
      if (selected === null && sessions.length) selected = sessions[0].session;
      renderSessions(sessions);
      if (selected !== null) {
        const r = await fetch(`/api/sessions/${encodeURIComponent(selected)}/timeline`);
        if (r.ok) renderTimeline(await r.json());
      }
    } catch (err) {
      $("#status").textContent = `cannot reach turnwatch: ${err}`;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

refresh();
setInterval(refresh, POLL_MS);
