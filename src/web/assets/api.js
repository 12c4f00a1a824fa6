// The page's only way to the server: JSON requests with the token, and the event-stream
// reader that resumes where it stopped.
//
// The stream is read with fetch rather than EventSource, because EventSource cannot send
// an Authorization header. The reader does what EventSource does (parse the SSE fields,
// reconnect with Last-Event-ID) and also drops any event at or below the last id it
// handed on, so a reconnect can neither lose nor double an event.

const TOKEN_KEY = "treadle.token";

/** Takes `#token=...` from the address once, keeps it in sessionStorage, and removes it
 * from the address bar and history. */
function takeToken() {
  const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (match) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

const token = takeToken();

function headers(extra) {
  const out = { Accept: "application/json", ...extra };
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

/** An answer that was not 2xx, with the server's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(`${status}: ${message}`);
    this.status = status;
  }
}

async function errorOf(response) {
  let text = await response.text();
  try {
    const body = JSON.parse(text);
    text = body.error || body.message || text;
  } catch (_) {
    // Not JSON: the text is the message.
  }
  return new ApiError(response.status, String(text).trim() || response.statusText);
}

/** GET a JSON document under /api/v1. */
export async function get(path) {
  const response = await fetch(`/api/v1${path}`, { headers: headers() });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

/** POST a JSON body under /api/v1; answers the JSON reply (or null). */
export async function post(path, body) {
  const response = await fetch(`/api/v1${path}`, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body ?? {}),
  });
  if (!response.ok) throw await errorOf(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** Splits an SSE byte stream into events: {id, event, data}. Feed it text, it calls
 * `onEvent` for each complete event (a blank line ends one). */
export class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.skipLF = false;
    this.reset();
  }

  reset() {
    this.id = null;
    this.event = "";
    this.data = [];
  }

  push(text) {
    if (text === "") return;
    // A \r that ended the previous piece may be the first half of \r\n.
    if (this.skipLF && text.startsWith("\n")) text = text.slice(1);
    this.skipLF = false;
    this.buffer += text;
    let end;
    while ((end = this.buffer.search(/[\r\n]/)) >= 0) {
      const line = this.buffer.slice(0, end);
      let sep = 1;
      if (this.buffer[end] === "\r") {
        if (end + 1 < this.buffer.length) sep = this.buffer[end + 1] === "\n" ? 2 : 1;
        else this.skipLF = true;
      }
      this.buffer = this.buffer.slice(end + sep);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length || this.event) {
        this.onEvent({ id: this.id, event: this.event || "message", data: this.data.join("\n") });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id") this.id = value;
  }
}

/**
 * Follows a run's events: catches up from the journal after `after`, then follows live.
 * handlers: event(kind, data, id) for enduring events, token(data) for live deltas,
 * end() once the run has ended and everything was delivered, state("live"|"retrying").
 * Returns {close()}.
 */
export function follow(runId, handlers, after = 0) {
  let lastId = after;
  let closed = false;
  let controller = null;
  let delay = 250;

  const dispatch = (message) => {
    if (message.event === "token") {
      handlers.token?.(JSON.parse(message.data));
      return;
    }
    if (message.event === "end") {
      closed = true;
      handlers.end?.();
      return;
    }
    const id = Number(message.id);
    if (!Number.isFinite(id) || id <= lastId) return;
    lastId = id;
    handlers.event?.(message.event, JSON.parse(message.data), id);
  };

  const connect = async () => {
    controller = new AbortController();
    const extra = { Accept: "text/event-stream" };
    if (lastId > 0) extra["Last-Event-ID"] = String(lastId);
    try {
      const response = await fetch(`/api/v1/runs/${runId}/events`, {
        headers: headers(extra),
        signal: controller.signal,
        cache: "no-store",
      });
      if (!response.ok) throw await errorOf(response);
      handlers.state?.("live");
      delay = 250;
      const parser = new SseParser(dispatch);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(value);
        if (closed) break;
      }
    } catch (error) {
      if (closed) return;
      if (error instanceof ApiError && error.status >= 400 && error.status < 500) {
        closed = true;
        handlers.error?.(error);
        return;
      }
    }
    if (closed) return;
    handlers.state?.("retrying");
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 5000);
  };

  connect();
  return {
    close() {
      closed = true;
      controller?.abort();
    },
    lastId: () => lastId,
  };
}

/** Downloads a file under /api/v1 with the token (a plain link cannot send it) as `name`. */
export async function download(path, name) {
  const response = await fetch(`/api/v1${path}`, { headers: headers({ Accept: "*/*" }) });
  if (!response.ok) throw await errorOf(response);
  const url = URL.createObjectURL(await response.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** GET a text file under /api/v1 with the token. */
export async function getText(path) {
  const response = await fetch(`/api/v1${path}`, { headers: headers({ Accept: "text/plain, */*" }) });
  if (!response.ok) throw await errorOf(response);
  return response.text();
}
