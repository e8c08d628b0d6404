// turnwatch's browser module: the user's own ends of a stop, on the browser's clock.
//
//   import { createStopTracer } from "./turnwatch-stop.js";
//   const tw = createStopTracer({ endpoint: "/v1/events" });
//   stopButton.onclick = () => {
//     const { traceparent } = tw.stopClicked({ session, turn });
//     fetch(`/api/sessions/${session}/stop`, { method: "POST", headers: { traceparent } });
//   };
//   // once the UI has rendered the session idle:
//   tw.processingCleared({ session });
//
// stopClicked() reads the clock first and mints a W3C traceparent: the UI sends it with its
// agent.abort, so the server's spans join the trace of the click. Both events carry
// attrs.source = "browser" and times from performance.timeOrigin + performance.now(), so
// stop → idle is measured on one clock at both ends (no skew with the server's). Events are
// posted as JSON lines (turnwatch's event schema) to POST /v1/events: the click at once (it
// should reach the server before the agent.abort it precedes), the rest batched; what is still
// queued when the page is hidden or unloaded goes by navigator.sendBeacon. No dependencies.

const SOURCE = "browser";

function hex(bytes) {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

function randomHex(n, random) {
  for (;;) {
    const bytes = new Uint8Array(n);
    random(bytes);
    const id = hex(bytes);
    if (!/^0+$/.test(id)) return id; // an all-zero id is invalid in W3C trace context
  }
}

/** Unix seconds on the browser's clock: the page's time origin plus its monotonic clock. */
export function browserNow() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

/**
 * A W3C traceparent for a new trace whose root is the click.
 * @param {(bytes: Uint8Array) => void} [random]
 */
export function newTraceparent(random = (b) => crypto.getRandomValues(b)) {
  return `00-${randomHex(16, random)}-${randomHex(8, random)}-01`;
}

/**
 * @param {import("./index").StopTracerOptions} [options]
 * @returns {import("./index").StopTracer}
 */
export function createStopTracer(options = {}) {
  const endpoint = options.endpoint ?? "/v1/events";
  const token = options.token ?? null;
  const flushMs = options.flushMs ?? 250;
  const maxBatch = options.maxBatch ?? 100;
  const now = options.now ?? browserNow;
  const doFetch = options.fetch ?? ((...a) => globalThis.fetch(...a));
  const beacon =
    options.sendBeacon ??
    (typeof navigator !== "undefined" && navigator.sendBeacon
      ? (url, data) => navigator.sendBeacon(url, data)
      : null);
  const random = options.random ?? ((b) => crypto.getRandomValues(b));
  const onError = options.onError ?? ((err) => console.warn("turnwatch:", err));
  const retries = options.retries ?? 3;
  const retryMs = options.retryMs ?? 200;
  const target = options.target ?? (typeof window !== "undefined" ? window : null);

  /** @type {object[]} */
  let queue = [];
  let timer = null;
  const stops = new Map(); // session → {turn, traceparent} of its last click
  const inflight = new Set();
  // Batches handed to a plain fetch and not yet answered: a page that goes away aborts that
  // fetch (under load it may not have left yet), so unload sends them again with the queue. The
  // endpoint keeps each event once (turnwatch's dedups what a browser sends).
  const unanswered = new Set();

  function body(events) {
    return events.map((e) => JSON.stringify(e)).join("\n") + "\n";
  }

  function post(events, attempt = 0, keepalive = false) {
    const headers = { "Content-Type": "application/x-ndjson" };
    if (token) headers.Authorization = `Bearer ${token}`;
    // fetch is called now, not in a microtask: the click's request must leave before the
    // agent.abort the UI sends right after stopClicked() returns.
    let request;
    try {
      request = Promise.resolve(
        // keepalive only while the page goes away (it outlives the page, and is slower to leave).
        doFetch(endpoint, { method: "POST", headers, body: body(events), keepalive }),
      );
    } catch (err) {
      request = Promise.reject(err);
    }
    if (!keepalive) unanswered.add(events);
    const sent = request
      .then(
        async (r) => {
          if (r.ok) {
            unanswered.delete(events);
            return;
          }
          let detail = "";
          try {
            detail = await r.text();
          } catch {}
          // The endpoint stores a batch whole or not at all, so sending it again is safe; a
          // 4xx other than 429 will not change (a bad line, a token, an origin): reported.
          const transient = r.status >= 500 || r.status === 429;
          const error = new Error(`POST ${endpoint}: ${r.status} ${detail}`.trim());
          retryOr(events, attempt, transient, error, keepalive);
        },
        (err) => retryOr(events, attempt, true, err, keepalive),
      )
      .finally(() => inflight.delete(sent));
    inflight.add(sent);
    return sent;
  }

  function retryOr(events, attempt, transient, err, keepalive) {
    // Waiting for its retry, a batch stays unanswered: a page hidden meanwhile sends it.
    if (!(transient && attempt < retries)) unanswered.delete(events);
    if (transient && attempt < retries) {
      const later = new Promise((resolve) => setTimeout(resolve, retryMs * 2 ** attempt)).then(() =>
        post(events, attempt + 1, keepalive),
      );
      inflight.add(later);
      later.finally(() => inflight.delete(later));
      return;
    }
    onError(err);
  }

  function schedule() {
    if (timer === null) timer = setTimeout(flush, flushMs);
  }

  function enqueue(event, now_) {
    queue.push(event);
    if (now_ || queue.length >= maxBatch) flush();
    else schedule();
  }

  function flush() {
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
    if (queue.length === 0) return Promise.resolve();
    const batch = queue;
    queue = [];
    return post(batch);
  }

  function flushOnUnload() {
    const batch = [...[...unanswered].flat(), ...queue];
    unanswered.clear();
    if (batch.length === 0) return true;
    queue = [];
    if (timer !== null) {
      clearTimeout(timer);
      timer = null;
    }
    // A beacon cannot carry an Authorization header: with a token, a keepalive fetch instead.
    if (!token && beacon) {
      const data = new Blob([body(batch)], { type: "text/plain" });
      if (beacon(endpoint, data)) return true;
    }
    post(batch, 0, true);
    return false;
  }

  function onHide() {
    if (typeof document === "undefined" || document.visibilityState === "hidden") flushOnUnload();
  }

  if (target && target.addEventListener) {
    target.addEventListener("pagehide", flushOnUnload);
    target.addEventListener("visibilitychange", onHide);
  }

  return {
    stopClicked({ session, turn }) {
      const ts = now(); // first: the click's time is the call's, not after our work
      if (!session) throw new TypeError("stopClicked: session is required");
      const traceparent = newTraceparent(random);
      const event = { ts, kind: "stop.clicked", session, attrs: { source: SOURCE, traceparent } };
      if (turn) event.turn = turn;
      stops.set(session, { turn: turn ?? null, traceparent, ts });
      enqueue(event, true);
      return { traceparent, clickedAt: ts };
    },

    processingCleared({ session, turn }) {
      const ts = now();
      if (!session) throw new TypeError("processingCleared: session is required");
      const stop = stops.get(session);
      const attrs = { source: SOURCE };
      if (stop) attrs.traceparent = stop.traceparent;
      const event = { ts, kind: "processing.cleared", session, attrs };
      const t = turn ?? stop?.turn;
      if (t) event.turn = t;
      stops.delete(session);
      enqueue(event, false);
      return { stopToIdle: stop ? ts - stop.ts : null };
    },

    flush,
    flushOnUnload,

    /** Events not yet handed to fetch or a beacon. */
    get pending() {
      return queue.length;
    },

    /** Resolves once every batch handed to fetch has been answered (retries included). */
    async settled() {
      while (inflight.size > 0) await Promise.all([...inflight]); // retries join as they start
    },

    close() {
      if (target && target.removeEventListener) {
        target.removeEventListener("pagehide", flushOnUnload);
        target.removeEventListener("visibilitychange", onHide);
      }
      return flush();
    },
  };
}
