// Auto-memory facts (with confidence and source; corrections marked as such) and the profile.
// Facts a person adds or edits become `manual`: the background updater never trims them.
import { api, seg } from './api.js';
import { clear, h, toast } from './dom.js';

const CATEGORIES = ['preference', 'knowledge', 'context', 'behavior', 'goal', 'correction'];
const PROFILE = [['workContext', 'Work context'], ['personalContext', 'Personal context'],
  ['topOfMind', 'Top of mind'], ['recentMonths', 'Recent months'], ['earlierContext', 'Earlier context'],
  ['longTermBackground', 'Long-term background']];

export async function factsView(view, base, { profile = true, title = 'Facts the assistant picked up' } = {}) {
  const data = await api('GET', `${base}/facts`);
  const err = h('div', { class: 'error', id: 'facts-error', role: 'alert' });
  const list = h('div', { id: 'fact-list' });
  for (const fact of data.facts) list.append(factRow(base, fact, err));
  if (!data.facts.length) list.append(h('p', { class: 'empty' }, 'No facts yet.'));
  const content = h('input', { type: 'text', id: 'new-fact', placeholder: 'e.g. business trip to Shanghai next week' });
  const category = h('select', { id: 'new-fact-category' }, CATEGORIES.map((c) => h('option', { value: c,
    selected: c === 'context' }, c)));
  const add = async (event) => {
    event.preventDefault();
    err.textContent = '';
    try {
      await api('POST', `${base}/facts`, { json: { content: content.value, category: category.value } });
      toast('Fact added');
      refresh(view, () => factsView(view, base, { profile, title }));
    } catch (e) { err.textContent = e.message; }
  };
  view.append(h('section', { class: 'card' },
    h('h2', {}, title, h('span', { class: 'muted' }, ` · ${data.count}`)),
    h('p', { class: 'hint' }, 'Most confident first. A correction replaced something the assistant had wrong.'),
    list, err,
    h('form', { class: 'row', id: 'add-fact', on: { submit: add } }, content, category,
      h('button', { type: 'submit' }, 'Add fact'))));
  if (profile) view.append(await profileCard(base));
}

function stamp(iso) {
  const d = iso ? new Date(iso) : null;
  return d && !Number.isNaN(d.getTime()) ? `changed ${d.toLocaleString()}` : '';
}

function refresh(view, again) {
  clear(view);
  again();
}

function factRow(base, fact, err) {
  const correction = fact.category === 'correction' || !!fact.source_error;
  const text = h('input', { type: 'text', class: 'fact-content', value: fact.content, 'aria-label': 'Fact' });
  const conf = h('input', { type: 'number', class: 'fact-confidence', min: 0, max: 1, step: 0.05,
    value: String(fact.confidence), 'aria-label': 'Confidence' });
  const save = async () => {
    err.textContent = '';
    try {
      await api('PATCH', `${base}/facts/${seg(fact.id)}`, { json: { content: text.value,
        confidence: Number(conf.value) } });
      toast('Fact saved');
    } catch (e) { err.textContent = e.message; }
  };
  const node = h('article', { class: `fact${correction ? ' correction' : ''}`, dataset: { id: fact.id } },
    h('div', { class: 'row spread' },
      h('span', {}, correction ? h('span', { class: 'badge warn' }, 'Correction') : null,
        correction && fact.category === 'correction' ? null : h('span', { class: 'badge' }, fact.category),
        h('span', { class: 'muted' }, ` confidence ${Math.round(fact.confidence * 100)}% · source ${fact.source || 'auto'}`
          + (fact.confirmations > 1 ? ` · said ${fact.confirmations}×` : '')
          + (fact.expires ? ` · until ${fact.expires}` : ''))),
      h('span', { class: 'muted' }, stamp(fact.updated || fact.created))),
    correction && fact.source_error ? h('p', { class: 'was' }, 'It used to think: ',
      h('s', {}, fact.source_error)) : null,
    h('div', { class: 'row' }, text, conf,
      h('button', { type: 'button', class: 'fact-save', on: { click: save } }, 'Save'),
      h('button', { type: 'button', class: 'danger fact-delete', on: { click: async () => {
        try {
          await api('DELETE', `${base}/facts/${seg(fact.id)}`);
          node.remove();
          toast('Fact deleted');
        } catch (e) { err.textContent = e.message; }
      } } }, 'Delete')));
  return node;
}

async function profileCard(base) {
  const profile = await api('GET', `${base}/profile`);
  const err = h('div', { class: 'error', id: 'profile-error', role: 'alert' });
  const fields = PROFILE.map(([key, label]) => [key, h('textarea', { rows: 2, id: `p-${key}`,
    value: profile[key] || '', 'aria-label': label })]);
  const save = async (event) => {
    event.preventDefault();
    err.textContent = '';
    try {
      await api('PUT', `${base}/profile`, { json: Object.fromEntries(fields.map(([k, el]) => [k, el.value])) });
      toast('Profile saved');
    } catch (e) { err.textContent = e.message; }
  };
  return h('section', { class: 'card' }, h('h2', {}, 'Profile'),
    h('p', { class: 'hint' }, 'The short summary the assistant keeps of you. Empty a section to remove it.'),
    h('form', { id: 'profile-form', on: { submit: save } },
      fields.map(([key, el]) => h('label', {}, PROFILE.find((p) => p[0] === key)[1], el)), err,
      h('button', { type: 'submit' }, 'Save profile')));
}
