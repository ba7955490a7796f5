// The operator's view (admin token): every place with counts and sizes, the shared memory and
// shared facts, snapshot status with its two actions, a session's debug view, key metrics.
import { api, seg } from './api.js';
import { bytes, clear, h, toast } from './dom.js';
import { factsView } from './facts.js';
import { renderMarkdown } from './md.js';

export async function operatorView(view, who, openUser) {
  const places = await api('GET', '/places');
  const table = h('table', { id: 'places' }, h('thead', {}, h('tr', {},
    ['Place', 'Kind', 'User', 'Files', 'Size', ''].map((c) => h('th', {}, c)))));
  const body = h('tbody', {});
  const snapshot = h('div', { id: 'snapshot-panel' });
  for (const p of places.places) {
    const actions = [];
    if (p.user_id) {
      actions.push(h('button', { type: 'button', class: 'small', on: { click: () => openUser(p.user_id) } }, 'Open'));
    }
    if (p.kind === 'user-agent') {
      actions.push(h('button', { type: 'button', class: 'small snapshot-status',
        on: { click: () => showSnapshot(snapshot, p.user_id, p.agent_type) } }, 'Snapshot'));
    }
    body.append(h('tr', { dataset: { path: p.path } }, h('td', {}, h('code', {}, p.path)), h('td', {}, p.kind),
      h('td', {}, p.user_id || '—'), h('td', { class: 'num' }, String(p.files)), h('td', { class: 'num' }, bytes(p.bytes)),
      h('td', {}, actions)));
  }
  table.append(body);
  view.append(h('section', { class: 'card' },
    h('h2', {}, 'Users and places', h('span', { class: 'muted', id: 'user-count' },
      ` · ${places.users} users, ${places.places.length} places`)), table, snapshot));
  const shared = h('div', {});
  view.append(shared);
  await sharedMemory(shared, who);
  const facts = h('div', {});
  view.append(facts);
  await factsView(facts, '/shared', { profile: false, title: 'Shared facts' }).catch((e) => facts.append(
    h('p', { class: 'error' }, e.message)));
  view.append(sessionCard(), await metricsCard());
}

async function sharedMemory(el, who) {
  const base = `/shared/agents/${seg(who.agent_type)}/memory`;
  const data = await api('GET', base);
  el.append(h('section', { class: 'card', id: 'shared-memory' },
    h('h2', {}, 'Shared agent memory', h('span', { class: 'muted' }, ` · ${data.count} · ${data.place.path}`)),
    data.files.length ? h('ul', {}, data.files.map((f) => h('li', {},
      h('a', { href: `#/shared/${encodeURIComponent(f.file)}` }, f.name), ` — ${f.description}`)))
      : h('p', { class: 'empty' }, 'No shared memory.')));
}

async function showSnapshot(el, user, agentType) {
  const base = `/users/${seg(user)}/agents/${seg(agentType)}/snapshot`;
  const draw = (s) => {
    clear(el).append(h('div', { class: 'card inset', id: 'snapshot' },
      h('h3', {}, `Snapshot of ${user}/${agentType}: `, h('span', { id: 'snapshot-state' }, s.state)),
      h('p', {}, s.reason), s.files && s.files.length ? h('p', { class: 'muted' }, s.files.join(', ')) : null,
      h('div', { class: 'row' },
        h('button', { type: 'button', id: 'snapshot-replace', disabled: s.state === 'none',
          on: { click: () => act('replace') } }, 'Replace with snapshot'),
        h('button', { type: 'button', id: 'snapshot-mark', disabled: s.state === 'none',
          on: { click: () => act('mark-synced') } }, 'Mark synced'))));
  };
  const act = async (action) => {
    try { draw(await api('POST', `${base}/${action}`)); toast(`Snapshot: ${action} done`); } catch (e) { toast(e.message); }
  };
  try { draw(await api('GET', base)); } catch (e) { clear(el).append(h('p', { class: 'error' }, e.message)); }
}

function sessionCard() {
  const input = h('input', { type: 'text', id: 'session-id', placeholder: 'session id' });
  const out = h('div', { id: 'session-out' });
  const show = async (event) => {
    event.preventDefault();
    clear(out);
    try {
      const s = await api('GET', `/sessions/${seg(input.value.trim())}?messages=true`);
      out.append(h('dl', { class: 'facts' },
        [['Mode', s.mode], ['Buffered messages', s.buffer_messages], ['Unsummarised tokens', s.buffer_tokens],
          ['Lock', s.lock_held ? `held by ${s.lock_holder || '?'} (${s.lock_ttl_ms} ms left)` : 'free'],
          ['Summary due', s.extraction_due ? 'yes' : 'no'], ['State hash', s.state_hash || '—'],
          ['Stored summary version', s.stored_version ?? '—']].map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
      h('h3', {}, 'Stored summary'), h('div', { class: 'md', id: 'session-summary' }, renderMarkdown(s.stored_summary || '(none)')),
      h('h3', {}, 'Last buffered messages'),
      h('ol', { class: 'messages' }, (s.messages || []).map((m) => h('li', {}, h('b', {}, `${m.role}: `), m.content))));
    } catch (e) { out.append(h('p', { class: 'error' }, e.message)); }
  };
  return h('section', { class: 'card' }, h('h2', {}, 'Session debug'),
    h('form', { class: 'row', on: { submit: show } }, input, h('button', { type: 'submit' }, 'Show')), out);
}

const KEY_METRICS = /^harness_memory_\w+(_total|_count)$/;

async function metricsCard() {
  const card = h('section', { class: 'card', id: 'metrics' }, h('h2', {}, 'Key metrics'));
  try {
    const text = await api('GET', '/metrics', { headers: { Accept: 'text/plain' } });
    const sums = new Map();
    for (const line of String(text).split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-+\deE.naNInf]+)/.exec(line);
      if (!m || !KEY_METRICS.test(m[1])) continue;
      sums.set(m[1], (sums.get(m[1]) || 0) + Number(m[3]));
    }
    card.append(sums.size ? h('table', {}, h('tbody', {}, [...sums].map(([k, v]) =>
      h('tr', {}, h('td', {}, h('code', {}, k)), h('td', { class: 'num' }, Number.isInteger(v) ? String(v) : v.toFixed(3))))))
      : h('p', { class: 'empty' }, 'No memory work counted yet.'));
  } catch (e) {
    card.append(h('p', { class: 'muted' }, `Metrics unavailable: ${e.message}`));
  }
  return card;
}
