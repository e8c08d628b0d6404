// The browser module, in Node's own test runner: fetch, sendBeacon, the clock and the random
// source are the injected ones, so every assertion is about what the module does with them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createStopTracer, newTraceparent } from "../turnwatch-stop.js";

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/;

function harness(options = {}) {
  const posts = [];
  const beacons = [];
  let clock = 1_700_000_000.0;
  const replies = options.replies ?? [];
  const tw = createStopTracer({
    flushMs: 20,
    retryMs: 5,
    now: () => clock,
    fetch: async (url, init) => {
      posts.push({ url, init, events: init.body.trim().split("\n").map((l) => JSON.parse(l)) });
      const reply = replies.shift();
      if (reply instanceof Error) throw reply;
      const status = reply ?? 200;
      return { ok: status < 300, status, text: async () => "" };
    },
    sendBeacon: (url, data) => {
      beacons.push({ url, data });
      return options.beaconTakes ?? true;
    },
    onError: (err) => (options.errors ?? []).push(err),
    target: options.target ?? null,
    ...options.tracer,
  });
  return { tw, posts, beacons, tick: (s) => (clock += s) };
}

const wait = (ms) => new Promise((r) => setTimeout(r, ms));

test("the click is sent at once, with a W3C traceparent and the browser's time", async () => {
  const { tw, posts } = harness();
  const click = tw.stopClicked({ session: "s1", turn: "s1.t1" });
  assert.match(click.traceparent, TRACEPARENT);
  assert.equal(click.clickedAt, 1_700_000_000.0);
  await tw.settled();
  assert.equal(posts.length, 1);
  const [ev] = posts[0].events;
  assert.deepEqual(ev, {
    ts: 1_700_000_000.0,
    kind: "stop.clicked",
    session: "s1",
    turn: "s1.t1",
    attrs: { source: "browser", traceparent: click.traceparent },
  });
  assert.equal(posts[0].url, "/v1/events");
  assert.equal(posts[0].init.method, "POST");
  assert.equal(posts[0].init.keepalive, false); // keepalive is for unload: it leaves later
});

test("idle is batched, carries the click's trace and turn, and measures stop → idle", async () => {
  const { tw, posts, tick } = harness();
  const click = tw.stopClicked({ session: "s1", turn: "s1.t1" });
  tick(0.25);
  const idle = tw.processingCleared({ session: "s1" });
  assert.equal(idle.stopToIdle, 0.25);
  assert.equal(tw.pending, 1); // batched, not yet sent
  await wait(60);
  await tw.settled();
  assert.equal(tw.pending, 0);
  assert.equal(posts.length, 2);
  assert.deepEqual(posts[1].events, [
    {
      ts: 1_700_000_000.25,
      kind: "processing.cleared",
      session: "s1",
      turn: "s1.t1",
      attrs: { source: "browser", traceparent: click.traceparent },
    },
  ]);
});

test("idle without a click is still recorded, without a trace", async () => {
  const { tw, posts } = harness();
  assert.equal(tw.processingCleared({ session: "s2" }).stopToIdle, null);
  await tw.flush();
  assert.deepEqual(posts[0].events[0].attrs, { source: "browser" });
});

test("a full batch is sent without waiting", async () => {
  const { tw, posts } = harness({ tracer: { maxBatch: 3, flushMs: 60_000 } });
  for (const s of ["a", "b", "c"]) tw.processingCleared({ session: s });
  await tw.settled();
  assert.equal(posts.length, 1);
  assert.equal(posts[0].events.length, 3);
});

test("on page hide what is queued goes by sendBeacon", async () => {
  const target = new EventTarget();
  const { tw, posts, beacons } = harness({ target, tracer: { flushMs: 60_000 } });
  tw.processingCleared({ session: "s1" });
  tw.processingCleared({ session: "s2" });
  target.dispatchEvent(new Event("pagehide"));
  assert.equal(beacons.length, 1);
  assert.equal(beacons[0].url, "/v1/events");
  const lines = (await beacons[0].data.text()).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.map((e) => e.session),
    ["s1", "s2"],
  );
  assert.equal(beacons[0].data.type, "text/plain"); // a simple request: no preflight
  assert.equal(posts.length, 0);
  assert.equal(tw.pending, 0);
  target.dispatchEvent(new Event("pagehide")); // nothing left: no empty beacon
  assert.equal(beacons.length, 1);
  await tw.close();
});

test("a batch whose fetch has not been answered when the page goes is sent by beacon", async () => {
  // Under load the page's fetch may not have left when it is hidden, and unload aborts it: its
  // events go again, with the queue (the endpoint keeps each once).
  const target = new EventTarget();
  const hanging = [];
  const { tw, beacons } = harness({
    target,
    tracer: { flushMs: 60_000, fetch: (url, init) => new Promise(() => hanging.push(init)) },
  });
  tw.processingCleared({ session: "s1" });
  tw.flush(); // handed to fetch, never answered
  tw.processingCleared({ session: "s2" }); // still queued
  assert.equal(hanging.length, 1);
  target.dispatchEvent(new Event("pagehide"));
  const lines = (await beacons[0].data.text()).trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(
    lines.map((e) => e.session),
    ["s1", "s2"],
  );
  target.dispatchEvent(new Event("pagehide")); // sent once: nothing left for another beacon
  assert.equal(beacons.length, 1);
});

test("an answered batch is not sent again on unload", async () => {
  const target = new EventTarget();
  const { tw, beacons } = harness({ target, tracer: { flushMs: 60_000 } });
  tw.processingCleared({ session: "s1" });
  await tw.flush();
  target.dispatchEvent(new Event("pagehide"));
  assert.equal(beacons.length, 0);
});

test("with a token, unload uses a keepalive fetch that can carry it", async () => {
  const { tw, posts, beacons } = harness({ tracer: { token: "sekrit", flushMs: 60_000 } });
  tw.processingCleared({ session: "s1" });
  assert.equal(tw.flushOnUnload(), false);
  await tw.settled();
  assert.equal(beacons.length, 0);
  assert.equal(posts[0].init.headers.Authorization, "Bearer sekrit");
  assert.equal(posts[0].init.keepalive, true);
});

test("a beacon the browser refuses falls back to fetch: nothing is lost", async () => {
  const { tw, posts } = harness({ beaconTakes: false, tracer: { flushMs: 60_000 } });
  tw.processingCleared({ session: "s1" });
  tw.flushOnUnload();
  await tw.settled();
  assert.equal(posts.length, 1);
});

test("a network error or a 5xx is retried; a 400 is reported, not retried", async () => {
  const errors = [];
  const { tw, posts } = harness({ replies: [new TypeError("offline"), 503, 200], errors });
  tw.stopClicked({ session: "s1" });
  await wait(80);
  await tw.settled();
  assert.equal(posts.length, 3);
  assert.deepEqual(posts[2].events, posts[0].events); // the same batch, whole
  assert.equal(errors.length, 0);

  const bad = [];
  const h = harness({ replies: [400], errors: bad });
  h.tw.stopClicked({ session: "s1" });
  await wait(30);
  await h.tw.settled();
  assert.equal(h.posts.length, 1);
  assert.equal(bad.length, 1);
  assert.match(String(bad[0]), /400/);
});

test("retries end: the error is reported once", async () => {
  const errors = [];
  const { tw, posts } = harness({ replies: [500, 500, 500, 500, 500], errors });
  tw.stopClicked({ session: "s1" });
  await wait(200);
  await tw.settled();
  assert.equal(posts.length, 4); // the first try and three retries
  assert.equal(errors.length, 1);
});

test("a traceparent is never all zeros", () => {
  let calls = 0;
  const tp = newTraceparent((b) => {
    calls += 1;
    b.fill(calls === 1 ? 0 : 7);
  });
  assert.match(tp, TRACEPARENT);
  assert.ok(!tp.includes("-00000000000000000000000000000000-"));
});

test("a session is required", () => {
  const { tw } = harness();
  assert.throws(() => tw.stopClicked({}), TypeError);
  assert.throws(() => tw.processingCleared({}), TypeError);
});
