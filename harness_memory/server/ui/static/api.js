// Calls to the JSON API beside this page, with the same credentials as any client.
// The token and user id typed into the login form live in sessionStorage (never cookies);
// behind a gateway neither is needed: the gateway adds `wid` (and the token) itself.
const TOKEN = 'hm.token';
const WID = 'hm.wid';
export const UI_HEADER = 'X-Harness-Memory';

export class ApiError extends Error {
  constructor(status, detail, code) {
    super(detail);
    this.status = status;
    this.code = code;
  }
}

export const creds = {
  get token() { return sessionStorage.getItem(TOKEN) || ''; },
  get wid() { return sessionStorage.getItem(WID) || ''; },
  save(token, wid) {
    if (token) sessionStorage.setItem(TOKEN, token); else sessionStorage.removeItem(TOKEN);
    if (wid) sessionStorage.setItem(WID, wid); else sessionStorage.removeItem(WID);
  },
  clear() { sessionStorage.removeItem(TOKEN); sessionStorage.removeItem(WID); },
};

// This module is served at <root>/ui/api.js; the API lives at <root>/ (also below a path prefix).
const ROOT = new URL('../', import.meta.url);

export function seg(value) {
  return String(value).split('/').map(encodeURIComponent).join('/');
}

export async function api(method, path, options = {}) {
  const headers = { Accept: 'application/json', ...(options.headers || {}) };
  if (creds.token) headers.Authorization = `Bearer ${creds.token}`;
  if (creds.wid) headers.wid = creds.wid;
  if (method !== 'GET') headers[UI_HEADER] = 'ui';
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    headers['Content-Type'] = 'application/json';
  }
  const resp = await fetch(new URL(path.replace(/^\//, ''), ROOT), {
    method, headers, body, credentials: 'same-origin', cache: 'no-store', redirect: 'error',
  });
  if (!resp.ok) {
    let detail = resp.statusText;
    let code = '';
    try {
      const err = await resp.json();
      detail = typeof err.detail === 'string' ? err.detail : JSON.stringify(err.detail);
      code = err.code || '';
    } catch { /* not JSON */ }
    throw new ApiError(resp.status, detail, code);
  }
  if (options.raw) return resp;
  if (resp.status === 204) return null;
  const type = resp.headers.get('content-type') || '';
  return type.includes('json') ? resp.json() : resp.text();
}
