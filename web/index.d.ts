/** Options of {@link createStopTracer}. Every one has a default a page can rely on. */
export interface StopTracerOptions {
  /** Where events are posted as JSON lines (turnwatch's `POST /v1/events`). Default `/v1/events`. */
  endpoint?: string;
  /** A bearer token (`serve --token-file`). With one, unload uses a keepalive fetch, not a beacon. */
  token?: string | null;
  /** How long an event may wait to be batched, ms (the click never waits). Default 250. */
  flushMs?: number;
  /** A batch is sent once this many events wait. Default 100. */
  maxBatch?: number;
  /** Unix seconds on the browser's clock. Default `(performance.timeOrigin + performance.now()) / 1000`. */
  now?: () => number;
  /** Times a batch is sent again after a network error, a 5xx or a 429 (doubling from `retryMs`). Default 3. */
  retries?: number;
  /** Default 200. */
  retryMs?: number;
  /** Default `globalThis.fetch`. */
  fetch?: typeof fetch;
  /** Default `navigator.sendBeacon`. */
  sendBeacon?: ((url: string, data: Blob) => boolean) | null;
  /** Default `crypto.getRandomValues`. */
  random?: (bytes: Uint8Array) => void;
  /** A batch the endpoint refused or could not take. Default: `console.warn`. */
  onError?: (err: unknown) => void;
  /** Where `pagehide` and `visibilitychange` are listened for. Default `window`. */
  target?: EventTarget | null;
}

export interface Click {
  /** W3C trace context for the UI's agent.abort request: the server's spans join the click's trace. */
  traceparent: string;
  /** Unix seconds, browser clock. */
  clickedAt: number;
}

export interface StopTracer {
  /** At the click: records `stop.clicked` (sent at once) and returns the trace to pass along. */
  stopClicked(stop: { session: string; turn?: string }): Click;
  /** Once the UI has rendered the session idle: records `processing.cleared` (batched). */
  processingCleared(idle: { session: string; turn?: string }): { stopToIdle: number | null };
  /** Send what is queued now. */
  flush(): Promise<unknown>;
  /** Send what is queued by `sendBeacon` (the page is going away); true when a beacon took it. */
  flushOnUnload(): boolean;
  /** Events not yet handed to fetch or a beacon. */
  readonly pending: number;
  /** Resolves once every batch handed to fetch so far has been answered. */
  settled(): Promise<void>;
  /** Stop listening for unload, and send what is queued. */
  close(): Promise<unknown>;
}

export function createStopTracer(options?: StopTracerOptions): StopTracer;
export function newTraceparent(random?: (bytes: Uint8Array) => void): string;
export function browserNow(): number;
