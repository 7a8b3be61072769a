// The page's calls to the service: each /v1 request with the key the user gave (kept in this
// tab's sessionStorage only), errors as the service's own `detail`, and a streamed answer read
// from POST /v1/query with stream: true (server-sent events over fetch, since EventSource can
// neither POST nor send a key).

const KEY = "corpusgraph.key";
let pending = 0;
let idleWaiters = [];

// An empty key is kept as such: the user said this service has none.
export function setKey(key) {
  sessionStorage.setItem(KEY, key);
}

export function hasKey() {
  return sessionStorage.getItem(KEY) !== null;
}

function headers(extra) {
  const key = sessionStorage.getItem(KEY);
  return Object.assign(key ? {"Authorization": "Bearer " + key} : {}, extra || {});
}

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function track(promise) {
  pending += 1;
  return promise.finally(() => {
    pending -= 1;
    if (pending === 0) { const w = idleWaiters; idleWaiters = []; w.forEach((r) => r()); }
  });
}

// Resolves once no request of the page is in flight (the browser test waits on it).
export function idle() {
  return pending === 0 ? Promise.resolve() : new Promise((resolve) => idleWaiters.push(resolve));
}

async function problem(resp) {
  let detail = resp.statusText || "request failed";
  try {
    const body = await resp.json();
    if (typeof body.detail === "string") detail = body.detail;
    else if (Array.isArray(body.detail)) detail = body.detail.map((d) => d.msg).join("; ");
  } catch (e) { /* not JSON: keep the status text */ }
  return new ApiError(resp.status, detail);
}

export function get(path, params) {
  const url = new URL(path, window.location.origin);
  Object.entries(params || {}).forEach(([k, v]) => { if (v !== null && v !== undefined) url.searchParams.set(k, v); });
  return track(fetch(url, {headers: headers()}).then(async (resp) => {
    if (!resp.ok) throw await problem(resp);
    return resp.json();
  }));
}

// POST /v1/query with stream: true; onEvent(kind, data) for each event, in order. Resolves when the
// stream ends (after `done` or `error`).
export function streamQuery(body, onEvent) {
  const init = {method: "POST", headers: headers({"Content-Type": "application/json"}),
                body: JSON.stringify(Object.assign({}, body, {stream: true}))};
  return track(fetch("/v1/query", init).then(async (resp) => {
    if (!resp.ok) throw await problem(resp);
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, cut), onEvent);
        buffer = buffer.slice(cut + 2);
      }
    }
    if (buffer.trim()) dispatch(buffer, onEvent);
  }));
}

function dispatch(block, onEvent) {
  let kind = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;  // a comment: the service's keep-alive
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") kind = value;
    else if (field === "data") data.push(value);
  }
  if (data.length) onEvent(kind, JSON.parse(data.join("\n")));
}
