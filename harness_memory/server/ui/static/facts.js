// Auto-memory facts, read first: what the assistant believes, how sure it is (in words), where it
// came from, until when. "This is wrong" records a correction (the old belief is kept and shown to
// the assistant as "avoid"); Edit changes the words, category and expiry; Delete goes to the trash.
// Facts a person adds or edits become `manual`: the background updater never trims them.
import { api, seg } from './api.js';
import { clear, h, openDialog, toast } from './dom.js';

const CATEGORIES = ['preference', 'knowledge', 'context', 'behavior', 'goal', 'correction'];
const CATEGORY_LABEL = { preference: 'preference', knowledge: 'knowledge', context: 'context', behavior: 'habit',
  goal: 'goal', correction: 'correction' };
const PROFILE = [['workContext', 'Work context'], ['personalContext', 'Personal context'],
  ['topOfMind', 'Top of mind'], ['recentMonths', 'Recent months'], ['earlierContext', 'Earlier context'],
  ['longTermBackground', 'Long-term background']];
const SOURCE = { auto: 'picked up from a conversation', manual: 'added or corrected by you', import: 'imported' };

// Confidence as people say it (the number stays in the tooltip).
export function sureness(confidence) {
  if (confidence >= 0.9) return 'sure';
  if (confidence >= 0.7) return 'fairly sure';
  if (confidence >= 0.5) return 'not sure';
  return 'a guess';
}

export async function factsView(view, base, { profile = true, title = 'Facts the assistant picked up', trashBase } = {}) {
  const data = await api('GET', `${base}/facts`);
  const err = h('div', { class: 'error', id: 'facts-error', role: 'alert' });
  const list = h('div', { id: 'fact-list' });
  const again = () => { clear(view); return factsView(view, base, { profile, title, trashBase }); };
  for (const fact of data.facts) list.append(factRow(base, fact, err, again, trashBase));
  if (!data.facts.length) list.append(h('p', { class: 'empty' }, 'No facts yet.'));
  const content = h('input', { type: 'text', id: 'new-fact', placeholder: 'e.g. business trip to Shanghai next week',
    'aria-label': 'New fact' });
  const category = h('select', { id: 'new-fact-category', 'aria-label': 'Category' }, CATEGORIES.filter((c) =>
    c !== 'correction').map((c) => h('option', { value: c, selected: c === 'context' }, CATEGORY_LABEL[c])));
  const add = async (event) => {
    event.preventDefault();
    err.textContent = '';
    try {
      await api('POST', `${base}/facts`, { json: { content: content.value, category: category.value } });
      toast('Fact added');
      await again();
    } catch (e) { err.textContent = e.message; }
  };
  const budget = data.max_tokens ? h('p', { class: `hint${data.tokens > data.max_tokens ? ' warn' : ''}`, id: 'facts-budget' },
    `${data.tokens} of ${data.max_tokens} tokens the assistant is shown` +
    (data.tokens > data.max_tokens ? ' — the least important facts are left out.' : '.')) : null;
  view.append(h('section', { class: 'card' },
    h('div', { class: 'row spread' }, h('h2', {}, title, h('span', { class: 'muted' }, ` · ${data.count}`)),
      trashBase ? h('a', { class: 'button secondary', href: '#/trash', id: 'facts-trash' }, 'Deleted facts') : null),
    h('p', { class: 'hint' }, 'Most certain first. If one is wrong, say so: the assistant will avoid the old belief.'),
    budget, list, err,
    h('form', { class: 'row', id: 'add-fact', on: { submit: add } }, content, category,
      h('button', { type: 'submit' }, 'Add fact'))));
  if (profile) view.append(await profileCard(base));
}

function stamp(iso) {
  const d = iso ? new Date(iso) : null;
  return d && !Number.isNaN(d.getTime()) ? `changed ${d.toLocaleString()}` : '';
}

function factRow(base, fact, err, again, trashBase) {
  const correction = fact.category === 'correction';
  const remove = async () => {
    err.textContent = '';
    try {
      await api('DELETE', `${base}/facts/${seg(fact.id)}`);
      node.remove();
      const undo = trashBase ? await lastTrashItem(trashBase, `${fact.id}.md`) : null;
      toast('Fact deleted', undo ? { label: 'Undo', run: async () => {
        try { await api('POST', `${trashBase}/trash/${seg(undo)}/restore`); toast('Fact restored'); await again(); }
        catch (e) { toast(e.message); }
      } } : undefined);
    } catch (e) { err.textContent = e.message; }
  };
  const meta = [sureness(fact.confidence), SOURCE[fact.source] || fact.source || 'picked up from a conversation'];
  if (fact.confirmations > 1) meta.push(`said ${fact.confirmations}×`);
  if (fact.expires) meta.push(`until ${fact.expires}`);
  const node = h('article', { class: `fact${correction ? ' correction' : ''}`, dataset: { id: fact.id } },
    h('div', { class: 'row spread' },
      h('span', {}, h('span', { class: `badge${correction ? ' warn' : ''}` }, correction ? 'Correction' : CATEGORY_LABEL[fact.category] || fact.category),
        h('span', { class: 'muted fact-meta', title: `confidence ${Math.round(fact.confidence * 100)}%` }, ` ${meta.join(' · ')}`)),
      h('span', { class: 'muted' }, stamp(fact.updated || fact.created))),
    h('p', { class: 'fact-text' }, fact.content),
    correction && fact.source_error ? h('p', { class: 'was' }, 'No longer: ', h('s', {}, fact.source_error),
      h('span', { class: 'muted' }, ' (the assistant is told to avoid it)')) : null,
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'small fact-wrong', on: { click: () => correctDialog(base, fact, again) } },
        'This is wrong…'),
      h('button', { type: 'button', class: 'small secondary fact-edit', on: { click: () => editDialog(base, fact, again) } },
        'Edit…'),
      h('button', { type: 'button', class: 'small danger fact-delete', on: { click: remove } }, 'Delete')));
  return node;
}

async function lastTrashItem(trashBase, file) {
  try {
    const trash = await api('GET', `${trashBase}/trash`);
    const item = trash.items.find((i) => i.files.some((f) => f.file === file));
    return item ? item.id : null;
  } catch { return null; }
}

function correctDialog(base, fact, again) {
  const input = h('input', { type: 'text', id: 'correct-input', 'aria-describedby': 'correct-error' });
  const error = h('p', { class: 'field-error', id: 'correct-error', role: 'alert' });
  const go = h('button', { type: 'submit', id: 'correct-go' }, 'Save the correction');
  const cancel = h('button', { type: 'button', class: 'secondary', id: 'correct-cancel' }, 'Cancel');
  const form = h('form', { id: 'correct-form' },
    h('p', {}, 'The assistant believes: ', h('s', {}, fact.content)),
    h('label', {}, 'What is true instead?', input), error, h('div', { class: 'row' }, go, cancel));
  const dlg = openDialog('This is wrong', form, { id: 'correct-dialog' });
  cancel.addEventListener('click', dlg.close);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    if (!input.value.trim()) { error.textContent = 'Write what is true, e.g. “lives in Shanghai”.'; input.focus(); return; }
    try {
      await api('POST', `${base}/facts/${seg(fact.id)}/correct`, { json: { content: input.value } });
      dlg.close();
      toast('Correction saved: the assistant will avoid the old belief');
      await again();
    } catch (e) { error.textContent = e.message; input.setAttribute('aria-invalid', 'true'); input.focus(); }
  });
}

function editDialog(base, fact, again) {
  const content = h('input', { type: 'text', id: 'edit-fact-content', value: fact.content });
  const category = h('select', { id: 'edit-fact-category' }, CATEGORIES.map((c) =>
    h('option', { value: c, selected: c === fact.category }, CATEGORY_LABEL[c])));
  const expires = h('input', { type: 'date', id: 'edit-fact-expires', value: fact.expires || '' });
  const error = h('p', { class: 'field-error', id: 'edit-fact-error', role: 'alert' });
  const cancel = h('button', { type: 'button', class: 'secondary', id: 'edit-fact-cancel' }, 'Cancel');
  const form = h('form', { id: 'edit-fact-form' },
    h('label', {}, 'Fact', content), h('label', {}, 'Category', category),
    h('label', {}, 'True until (optional)', expires), error,
    h('div', { class: 'row' }, h('button', { type: 'submit', id: 'edit-fact-save' }, 'Save'), cancel));
  const dlg = openDialog('Edit the fact', form, { id: 'edit-fact-dialog' });
  cancel.addEventListener('click', dlg.close);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    const json = { content: content.value, category: category.value };
    if (expires.value) json.expires = expires.value;
    try {
      await api('PATCH', `${base}/facts/${seg(fact.id)}`, { json });
      dlg.close();
      toast('Fact saved');
      await again();
    } catch (e) { error.textContent = e.message; }
  });
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
