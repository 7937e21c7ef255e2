// The HTTP client: same-origin fetch with the session cookie, JSON in and out, and errors as
// ApiError carrying the server's `{error, message, reason}`.

export class ApiError extends Error {
  constructor(status, body, cause) {
    super(body?.message || (status === 0 ? 'network error' : `HTTP ${status}`));
    this.status = status;
    this.code = body?.error || (status === 0 ? 'network' : `http_${status}`);
    this.reason = body?.reason;
    this.body = body;
    this.cause = cause;
    this.userMessage = describeError(this);
  }
}

let unauthorizedHandler = null;

/** Called (once per failing request) when a request answers 401: the browser session ended. */
export function onUnauthorized(fn) {
  unauthorizedHandler = fn;
}

export async function request(method, path, body, opts = {}) {
  const init = { method, credentials: 'same-origin', cache: 'no-store', headers: { ...opts.headers }, signal: opts.signal, keepalive: Boolean(opts.keepalive) };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e?.name === 'AbortError') throw e;
    throw new ApiError(0, null, e);
  }
  const text = await res.text().catch(() => '');
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && !opts.quiet401 && unauthorizedHandler) unauthorizedHandler();
    throw err;
  }
  return data;
}

export const get = (path, opts) => request('GET', path, undefined, opts);
export const post = (path, body, opts) => request('POST', path, body ?? {}, opts);
export const put = (path, body, opts) => request('PUT', path, body, opts);
export const patch = (path, body, opts) => request('PATCH', path, body, opts);
export const del = (path, opts) => request('DELETE', path, undefined, opts);

/** `/v1/ws/{ws}/agent/sessions{rest}` */
export function sessionsPath(ws, rest = '') {
  return `/v1/ws/${encodeURIComponent(ws)}/agent/sessions${rest}`;
}

export function sessionPath(ws, id, rest = '') {
  return sessionsPath(ws, `/${encodeURIComponent(id)}${rest}`);
}

export function agentsPath(ws, rest = '') {
  return `/v1/ws/${encodeURIComponent(ws)}/agents${rest}`;
}

/** A fresh UUID for one submission's clientRequestId (randomUUID needs a secure context). */
export function uuid() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const CWD_REASONS = {
  missing: 'That folder does not exist in the workspace drive.',
  not_a_directory: 'That path is a file, not a folder.',
  outside_drive: 'That path leads outside the workspace drive.',
  outside_agent_anchor: "That folder is outside this agent's own folder.",
};

/** The error in words for people. */
export function describeError(err) {
  if (!err) return 'Something went wrong.';
  switch (err.code) {
    case 'network':
      return 'Cannot reach sessiond. Check that the server is running, then try again.';
    case 'invalid_cwd':
      return CWD_REASONS[err.reason] || 'That folder cannot be used.';
    case 'cwd_conflict':
      return 'Someone else moved this session at the same moment. Reload it and try again.';
    case 'unauthorized':
      return err.body?.message && err.status !== 401 ? err.body.message : 'Wrong email or password.';
    case 'rate_limited':
      return 'Too many failed sign-ins. Wait a moment and try again.';
    case 'not_found':
      return 'Not found: it may have been deleted.';
    case 'not_asking':
      return 'The session is no longer waiting for an answer.';
    case 'payload_too_large':
      return 'That is too large to send.';
    case 'exists':
      return 'A file with that name already exists.';
    case 'too_many_streams':
      return 'Too many open views of this session. Close some tabs.';
    case 'unavailable':
      return 'The server is shutting down. Try again in a moment.';
    case 'agent_not_found':
      return 'That agent does not exist.';
    case 'forbidden':
      return err.body?.message ? capitalise(err.body.message) + '.' : 'You are not allowed to do that.';
    case 'internal':
      return 'The server hit an internal error. Try again.';
    default:
      if (err.body?.message) return capitalise(err.body.message);
      if (err.status >= 500) return `The server answered with an error (${err.status}).`;
      return err.message || 'Something went wrong.';
  }
}

function capitalise(s) {
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}
