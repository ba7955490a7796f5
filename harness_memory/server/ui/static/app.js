// The memory page: sign-in, then the person's views (memories, facts & profile, export &
// import) and, with the admin token, the operator's. Views are chosen by the URL hash.
import { api, ApiError, creds } from './api.js';
import { clear, clearStaleToast, h } from './dom.js';
import { factsView } from './facts.js';
import { editorView, listPath, memoriesView, memoryView } from './memories.js';
import { operatorView } from './operator.js';
import { transferView } from './transfer.js';
import { trashView } from './trash.js';

const VIEW_USER = 'hm.viewUser';
const AGENT = 'hm.agent';
const FIRST_VIEW = { route: 'memory', base: '/users/me/agents/default/memory' };
let who = null;
let early = null; // the first page of memories, asked for beside /whoami (most visits open it)

function $(id) { return document.getElementById(id); }

function subject() {
  // An operator may open any user's memory; a person always acts as themself ("me").
  if (who.admin) return sessionStorage.getItem(VIEW_USER) || who.user_id;
  return 'me';
}

function userBase() {
  return `/users/${encodeURIComponent(subject())}`;
}

function agentType() {
  return sessionStorage.getItem(AGENT) || who.agent_type;
}

// Which agent's memory to show: the default one, or another the user has memory of (found by
// listing the user's places, on demand only).
function agentPicker() {
  const box = h('span', { class: 'agent-picker' });
  const show = async () => {
    try {
      const found = await api('GET', `${userBase()}/memory`);
      const types = new Set([who.agent_type, agentType()]);
      for (const p of found.places) {
        const m = /\/agent-memory\/([^/]+)$/.exec(p.path);
        if (p.kind === 'user-agent' && m) types.add(m[1]);
      }
      const select = h('select', { id: 'agent-type', 'aria-label': 'Agent' }, [...types].sort().map((t) =>
        h('option', { value: t, selected: t === agentType() }, t)));
      select.addEventListener('change', () => { sessionStorage.setItem(AGENT, select.value); route(); });
      clear(box).append(select);
    } catch (e) { clear(box).append(h('span', { class: 'error' }, e.message)); }
  };
  box.append(h('button', { type: 'button', class: 'small secondary', id: 'agent-button', on: { click: show } },
    `agent: ${agentType()} ▾`));
  return box;
}

// The user's auto-memory place (facts and profile): its trash holds deleted facts.
function factsPlace() {
  return `${userBase()}/projects/${encodeURIComponent(who.project)}/memory`;
}

function places() {
  const agent = encodeURIComponent(agentType());
  return {
    mine: { route: 'memory', editRoute: 'edit', trash: '#/trash', base: `${userBase()}/agents/${agent}/memory`, editable: true,
      sessions: `${userBase()}/sessions`, agentType: agentType(),
      title: 'Memories', label: `agent-memory/${agentType()}`, picker: agentPicker,
      hint: 'What the assistant saved about you, your feedback, your projects and references. Open one to correct it.' },
    shared: { route: 'shared', editRoute: 'shared-edit', base: `/shared/agents/${agent}/memory`, editable: true,
      title: 'Shared agent memory', label: `agent-memory/${who.agent_type} (shared)`, hint: 'Shared by every user.' },
  };
}

async function boot() {
  $('login-form').addEventListener('submit', login);
  window.addEventListener('hashchange', route);
  if (/^#?\/?(memories)?$/.test(location.hash) && !sessionStorage.getItem(VIEW_USER) &&
    !sessionStorage.getItem(AGENT)) {
    early = api('GET', listPath(FIRST_VIEW, { type: '', query: '', page: 0 })).catch(() => null);
  }
  try {
    who = await api('GET', '/whoami');
  } catch (e) {
    showLogin(e instanceof ApiError && e.status === 401 && (creds.token || creds.wid) ? e.message : '');
    return;
  }
  signedIn();
}

function showLogin(message) {
  $('login').hidden = false;
  $('nav').hidden = true;
  clear($('view'));
  $('login-error').textContent = message || '';
}

async function login(event) {
  event.preventDefault();
  creds.save($('login-token').value.trim(), $('login-user').value.trim());
  try {
    who = await api('GET', '/whoami');
  } catch (e) {
    creds.clear();
    $('login-error').textContent = e.message;
    return;
  }
  $('login').hidden = true;
  signedIn();
}

function signedIn() {
  $('login').hidden = true;
  $('nav').hidden = false;
  $('nav-operator').hidden = !who.admin;
  const out = h('button', { type: 'button', class: 'small secondary', id: 'logout', on: { click: () => {
    creds.clear(); sessionStorage.removeItem(VIEW_USER); sessionStorage.removeItem(AGENT);
    location.hash = ''; location.reload();
  } } }, 'Sign out');
  const label = who.admin ? 'Operator · viewing ' : 'Signed in as ';
  clear($('who')).append(label, h('b', { id: 'who-user' }, (who.admin ? subject() : who.user_id) || '(no user)'), ' ', out);
  route();
}

let ticket = 0;

async function route() {
  if (!who) return;
  const mine = ++ticket;
  const prefetched = early; // only the first view may use it: later ones must see later changes
  early = null;
  const host = $('view');
  delete host.dataset.ready;
  clearStaleToast(); // a note about the last view must not linger over the next one
  const view = h('div', { class: 'view' });
  const [name, ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : '';
  for (const link of document.querySelectorAll('#nav a')) {
    const on = link.dataset.view === (name || 'memories') ||
      (['memory', 'edit'].includes(name) && link.dataset.view === 'memories');
    link.classList.toggle('active', on);
    if (on) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
  }
  const p = places();
  try {
    if (!subject() && name !== 'operator' && name !== 'shared') {
      location.hash = '#/operator';
      return;
    }
    if (name === 'memory' && arg === 'new') await editorView(view, p.mine, '', '#/memories');
    else if (name === 'memory' && arg) await memoryView(view, p.mine, arg, '#/memories');
    else if (name === 'edit' && arg) await editorView(view, p.mine, arg, '#/memories');
    else if (name === 'shared' && arg === 'new') await editorView(view, p.shared, '', '#/operator');
    else if (name === 'shared' && arg) await memoryView(view, p.shared, arg, '#/operator');
    else if (name === 'shared-edit' && arg) await editorView(view, p.shared, arg, '#/operator');
    else if (name === 'facts') await factsView(view, userBase(), { trashBase: factsPlace() });
    else if (name === 'trash') {
      await trashView(view, [
        { key: 'memories', title: 'Memories', what: 'memory', base: p.mine.base },
        { key: 'facts', title: 'Facts', what: 'fact', base: factsPlace() }]);
    }
    else if (name === 'transfer') transferView(view, userBase(), subject());
    else if (name === 'operator' && who.admin) await operatorView(view, who, openUser);
    else {
      const first = subject() === 'me' && p.mine.base === FIRST_VIEW.base ? prefetched : null;
      await memoriesView(view, p.mine, first);
    }
  } catch (e) {
    view.append(h('p', { class: 'error', id: 'view-error', role: 'alert' }, e.message));
  }
  if (mine !== ticket) return; // a newer navigation owns the page
  clear(host).append(view);
  const first = view.querySelector('[autofocus]');
  if (first) first.focus();
  host.dataset.ready = name || 'memories';
}

function openUser(user) {
  sessionStorage.setItem(VIEW_USER, user);
  sessionStorage.removeItem(AGENT);
  signedIn();
  location.hash = '#/memories';
}

boot();
