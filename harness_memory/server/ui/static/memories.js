// Agent memories of one place: listed by type (paged: a place may hold thousands), searched over
// whole memories, selected and deleted in bulk (into the trash: undoable), opened in a read view
// (rendered markdown, long bodies collapsed, earlier versions), edited on demand in a form whose
// Save stays in reach. The server composes and validates the file and names the field it refuses.
import { api, seg } from './api.js';
import { bytes, clear, clearToast, confirmBox, h, originWords, toast, when } from './dom.js';
import { renderMarkdown } from './md.js';

export const TYPES = ['user', 'feedback', 'project', 'reference'];
const TYPE_LABEL = { user: 'About you', feedback: 'How you want things done', project: 'Projects', reference: 'References' };
const PAGE = 50;
const COLLAPSE_CHARS = 1500;
const ORDERS = [['type', 'By type, newest first'], ['updated', 'Newest first'], ['file', 'By file name']];

export function listPath(place, state) {
  const params = new URLSearchParams({ limit: String(PAGE), offset: String(state.page * PAGE),
    order: state.order || 'type' });
  if (state.type) params.set('type', state.type);
  if (state.query.trim()) params.set('q', state.query.trim());
  return `${place.base}?${params}`;
}

// Put a trash item back (the Undo of a deletion).
export async function undoDelete(base, trashId, after) {
  try {
    const done = await api('POST', `${base}/trash/${seg(trashId)}/restore`);
    toast(`Restored ${done.restored.length === 1 ? done.restored[0] : `${done.restored.length} memories`}`);
    if (after) after();
  } catch (e) { toast(e.message); }
}

// The server filters and pages (a place may hold thousands of memories): one page of rows in the DOM.
export async function memoriesView(view, place, first) {
  const state = { type: '', query: '', page: 0, order: 'type' };
  let data = (first && await first) || await api('GET', listPath(place, state));
  const total = data.total ?? Object.values(data.types || {}).reduce((a, b) => a + b, 0);
  const selected = new Set();
  const list = h('div', { id: 'memory-list' });
  const pager = h('div', { class: 'pager', id: 'pager' });
  const search = h('input', { type: 'search', id: 'memory-filter', placeholder: 'Search all words, in the text too',
    'aria-label': 'Search memories (every word must match)' });
  const order = h('select', { id: 'memory-order', 'aria-label': 'Sort' }, ORDERS.map(([v, label]) =>
    h('option', { value: v }, label)));
  const chips = h('div', { class: 'chips', role: 'tablist', 'aria-label': 'Memory type' });
  const err = h('div', { class: 'error', role: 'alert' });
  const bulk = h('div', { class: 'bulk row', id: 'bulk-bar', hidden: true });
  const budget = h('p', { class: 'hint', id: 'budget-lines' });
  let asked = 0;

  const reload = async () => {
    const mine = ++asked;
    try {
      const answer = await api('GET', listPath(place, state));
      if (mine !== asked) return; // a newer filter or page won
      data = answer;
      err.textContent = '';
      draw();
    } catch (e) { err.textContent = e.message; }
  };

  const drawBulk = () => {
    bulk.hidden = !place.editable || selected.size === 0;
    clear(bulk).append(
      h('span', { id: 'bulk-count' }, `${selected.size} selected`),
      h('button', { type: 'button', class: 'danger small', id: 'bulk-delete', on: { click: bulkDelete } },
        'Delete selected…'),
      h('button', { type: 'button', class: 'secondary small', id: 'bulk-clear', on: { click: () => {
        selected.clear(); draw();
      } } }, 'Clear selection'));
  };

  const bulkDelete = () => {
    const files = [...selected];
    confirmBox(`Move ${files.length} ${files.length === 1 ? 'memory' : 'memories'} to the trash? The assistant ` +
      'will no longer know them.', null, async () => {
      try {
        const done = await api('POST', `${place.base}/delete`, { json: { files } });
        selected.clear();
        await reload();
        toast(`Moved ${done.deleted.length} to the trash`, done.trash_id ? {
          label: 'Undo', run: () => undoDelete(place.base, done.trash_id, reload) } : undefined);
      } catch (e) { err.textContent = e.message; }
    }, { yes: 'Move to trash', hint: 'You can restore them from the trash.' });
  };

  const draw = () => {
    clear(list);
    let lastType = null;
    for (const f of data.files) {
      if (state.order === 'type' && f.type !== lastType) {
        list.append(h('h3', { class: 'type-head' }, TYPE_LABEL[f.type] || f.type || 'Other',
          h('span', { class: 'muted' }, ` · ${f.type}`)));
        lastType = f.type;
      }
      list.append(row(place, f, selected, drawBulk));
    }
    if (!data.files.length) list.append(h('p', { class: 'empty', id: 'memory-empty' }, total
      ? 'No memory matches.' : 'The assistant has not saved any memory here yet.'));
    const pages = Math.max(1, Math.ceil(data.matched / PAGE));
    const from = state.page * PAGE;
    clear(pager).append(
      h('button', { type: 'button', id: 'page-prev', disabled: state.page === 0,
        on: { click: () => { state.page--; reload(); } } }, '‹ Previous'),
      h('span', { id: 'page-info' }, data.matched ? `${from + 1}–${from + data.files.length} of ${data.matched}` : '0 of 0'),
      h('button', { type: 'button', id: 'page-next', disabled: state.page >= pages - 1,
        on: { click: () => { state.page++; reload(); } } }, 'Next ›'));
    const matched = Object.values(data.types || {}).reduce((a, b) => a + b, 0);
    for (const chip of chips.children) {
      const t = chip.dataset.type;
      const on = t === state.type;
      chip.classList.toggle('active', on);
      chip.setAttribute('aria-selected', on ? 'true' : 'false');
      chip.tabIndex = on ? 0 : -1;
      chip.textContent = t ? `${t} (${(data.types || {})[t] || 0})` : `all (${matched})`;
    }
    drawBulk();
  };

  for (const t of ['', ...TYPES]) {
    chips.append(h('button', { type: 'button', class: 'chip', dataset: { type: t }, role: 'tab',
      'aria-controls': 'memory-list', on: { click: () => { state.type = t; state.page = 0; reload(); } } }, t || 'all'));
  }
  chips.addEventListener('keydown', (event) => { // arrow keys move between the tabs
    const keys = { ArrowRight: 1, ArrowLeft: -1 };
    if (!(event.key in keys)) return;
    const all = [...chips.children];
    const next = all[(all.indexOf(document.activeElement) + keys[event.key] + all.length) % all.length];
    next.focus();
    next.click();
  });
  let typing = 0;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.query = search.value; state.page = 0; reload(); }, 200);
  });
  order.addEventListener('change', () => { state.order = order.value; state.page = 0; reload(); });
  view.append(h('section', { class: 'card' },
    h('div', { class: 'row spread' },
      h('h2', {}, place.title, h('span', { class: 'muted', id: 'memory-count' }, ` · ${total} memories`),
        place.picker ? [' ', place.picker()] : null),
      h('div', { class: 'row' },
        place.trash ? h('a', { class: 'button secondary', href: place.trash, id: 'open-trash' }, 'Trash') : null,
        place.editable ? h('a', { class: 'button', href: `#/${place.route}/new`, id: 'new-memory' }, 'New memory')
          : null)),
    h('p', { class: 'hint' }, place.hint), budget,
    h('div', { class: 'row filters' }, chips, search, order), err, bulk, list, pager, indexBox(place),
    place.sessions ? recalledBox(place) : null));
  draw();
  showBudget(place, budget);
}

// MEMORY.md in sight: how many of its lines the assistant reads at the start of a conversation.
async function showBudget(place, out) {
  try {
    const index = await api('GET', `${place.base}/index`);
    const max = index.max_lines || 200;
    out.textContent = `MEMORY.md: ${index.total_lines} of ${max} lines the assistant reads first` +
      (index.truncated ? ' — the rest is cut off; merge or delete old memories.' : '.');
    out.classList.toggle('warn', index.truncated || index.total_lines > max * 0.9);
  } catch { out.textContent = ''; }
}

// MEMORY.md as the model reads it at the start of every conversation (asked for on demand).
function indexBox(place) {
  const out = h('pre', { id: 'index-text', class: 'result' });
  const show = async () => {
    try {
      const index = await api('GET', `${place.base}/index`);
      out.textContent = index.text || '(empty)';
    } catch (e) { out.textContent = e.message; }
  };
  return h('div', {}, h('button', { type: 'button', class: 'small secondary', id: 'show-index', on: { click: show } },
    'What the assistant reads first (MEMORY.md)'), out);
}

// Which memories recall put into one conversation (by its session id), linked to their read view.
function recalledBox(place) {
  const input = h('input', { type: 'text', id: 'recalled-session', placeholder: 'session id',
    'aria-label': 'Session id' });
  const out = h('div', { id: 'recalled-out' });
  const show = async (event) => {
    event.preventDefault();
    clear(out);
    if (!input.value.trim()) return;
    try {
      const data = await api('GET', `${place.sessions}/${seg(input.value.trim())}/recalled?agent_type=` +
        encodeURIComponent(place.agentType));
      out.append(data.files.length ? h('ul', { id: 'recalled-files' }, data.files.map((f) => h('li', {},
        f.startsWith('shared/') ? f : h('a', { href: `#/${place.route}/${encodeURIComponent(f)}` }, f))))
        : h('p', { class: 'empty' }, 'No memory was recalled in that conversation (or it has expired).'));
      const why = await api('GET', `${place.sessions}/${seg(input.value.trim())}/why?agent_type=` +
        encodeURIComponent(place.agentType));
      if (why.recorded) out.append(whyBox(why));
    } catch (e) { out.append(h('p', { class: 'error' }, e.message)); }
  };
  return h('details', { class: 'recalled' }, h('summary', {}, 'Which memories were recalled in a conversation?'),
    h('form', { class: 'row', id: 'recalled-form', on: { submit: show } }, input,
      h('button', { type: 'submit', class: 'small secondary' }, 'Show')), out);
}

// What chose the memories of a conversation's last recall, in words (the `path` the server records).
const PATHS = {
  model: 'the assistant’s light model picked them from the ranking below',
  fallback: 'the light model was asked but did not answer usably, so the ranking below chose',
  confident: 'the ranking below was clear, so the light model was not asked',
  slow: 'the light model is too slow right now, so the ranking below chose',
  lexical: 'the ranking below chose (no light model, or only a few memories)',
  floor: 'nothing was relevant enough to the message',
  none: 'nothing matched',
};
const score = (x) => (x === null || x === undefined ? '—' : x.toFixed(3));

// Why the last recall of a session put in what it did: the message, who chose, the ranking.
function whyBox(why) {
  const picked = new Set(why.chosen);
  const table = why.candidates.length ? h('table', { id: 'why-ranking', class: 'why-table' },
    h('caption', {}, 'Ranking, best first'),
    h('thead', {}, h('tr', {}, ['Memory', 'Words (BM25)', 'Meaning (cosine)', 'Fused', 'Chosen'].map((t) =>
      h('th', { scope: 'col' }, t)))),
    h('tbody', {}, why.candidates.map((c) => h('tr', { dataset: { file: c.file } },
      h('td', {}, c.file), h('td', {}, score(c.lexical)), h('td', {}, score(c.semantic)), h('td', {}, score(c.fused)),
      h('td', {}, picked.has(c.file) ? 'yes' : ''))))) : null;
  return h('div', { id: 'why', class: 'why' },
    h('h3', {}, 'Why these were recalled'),
    h('p', { id: 'why-query' }, `Last message (${when(why.at)}): “${why.query}”`),
    h('p', { id: 'why-path', dataset: { path: why.path || 'none' } }, `How: ${PATHS[why.path] || why.path}.`),
    h('p', { id: 'why-model' }, why.model_asked
      ? (why.model_picked ? `The light model was asked and picked: ${why.model_picked.join(', ') || 'nothing'}.`
        : 'The light model was asked but its answer was not used.')
      : 'The light model was not asked.'),
    why.surfaced_before ? h('p', { class: 'muted' },
      `${why.surfaced_before} memories were left out: already recalled earlier in this conversation.`) : null,
    table);
}

function row(place, f, selected, changed) {
  const box = place.editable ? h('input', { type: 'checkbox', class: 'pick', checked: selected.has(f.file),
    'aria-label': `Select ${f.name}` }) : null;
  if (box) box.addEventListener('change', () => { if (box.checked) selected.add(f.file); else selected.delete(f.file); changed(); });
  return h('article', { class: 'memory', dataset: { file: f.file } },
    h('div', { class: 'row spread' },
      h('span', { class: 'row' }, box,
        h('a', { class: 'memory-name', href: `#/${place.route}/${encodeURIComponent(f.file)}` }, f.name)),
      h('span', { class: 'muted' }, `${f.type} · ${bytes(f.size)} · changed ${when(f.updated_at)}` +
        (f.last_recalled ? ` · recalled ${when(f.last_recalled)}` : ''))),
    h('p', { class: 'memory-desc' }, f.description));
}

function origin(extra) {
  const by = extra && (extra.source || extra.origin);
  return by ? ` · source: ${by}` : '';
}

// The read view: what the memory says, rendered; Edit, History and Delete on demand.
export async function memoryView(view, place, file, back) {
  let form;
  try {
    form = await api('GET', `${place.base}/fields/${seg(file)}`);
  } catch (e) {
    if (e.status !== 422) throw e;
    return rawEditor(view, place, file, back, e.message); // a file the form cannot read: fix it as text
  }
  const err = h('div', { class: 'error', id: 'read-error', role: 'alert' });
  const body = h('div', { class: 'md read-body', id: 'read-body' }, renderMarkdown(form.body));
  const long = form.body.length > COLLAPSE_CHARS || form.body.split('\n').length > 40;
  let more = null;
  if (long) {
    body.classList.add('collapsed');
    more = h('button', { type: 'button', class: 'secondary small', id: 'read-more', 'aria-expanded': 'false',
      'aria-controls': 'read-body' }, `Show all (${bytes(new TextEncoder().encode(form.body).length)})`);
    more.addEventListener('click', () => {
      const open = body.classList.toggle('collapsed') === false;
      more.setAttribute('aria-expanded', open ? 'true' : 'false');
      more.textContent = open ? 'Show less' : `Show all (${bytes(new TextEncoder().encode(form.body).length)})`;
    });
  }
  const history = h('div', { id: 'history', hidden: true });
  const historyButton = h('button', { type: 'button', class: 'secondary', id: 'show-history', 'aria-expanded': 'false',
    'aria-controls': 'history' }, 'History');
  historyButton.addEventListener('click', async () => {
    const open = history.hidden;
    history.hidden = !open;
    historyButton.setAttribute('aria-expanded', open ? 'true' : 'false');
    if (open) await drawHistory(history, place, form.file);
  });
  const remove = () => confirmBox(`Move the memory “${form.name}” to the trash? The assistant will no longer know it.`,
    null, async () => {
      try {
        const done = await api('POST', `${place.base}/delete`, { json: { files: [form.file] } });
        location.hash = back;
        toast(`Moved ${form.file} to the trash`, done.trash_id ? { label: 'Undo',
          run: () => undoDelete(place.base, done.trash_id, () => { location.hash = `#/${place.route}/${seg(form.file)}`; }) }
          : undefined);
      } catch (e) { err.textContent = e.message; }
    }, { yes: 'Move to trash', hint: 'You can restore it from the trash.' });
  view.append(h('section', { class: 'card reader' },
    h('div', { class: 'row spread' }, h('h2', { id: 'read-name' }, form.name),
      h('span', { class: 'badge' }, form.type)),
    h('p', { class: 'read-desc', id: 'read-desc' }, form.description),
    h('p', { class: 'muted', id: 'read-meta' }, `${place.label}/${form.file}` +
      (form.created_at ? ` · saved first ${when(form.created_at)}` : '') +
      ` · this version by ${originWords(form.origin)}, ${when(form.last_modified)}` + origin(form.extra)),
    place.sessions ? h('p', { class: 'muted', id: 'read-recalled' }, form.last_recalled
      ? `Last recalled into a conversation ${when(form.last_recalled)}.` : 'Not recalled into a conversation lately.')
      : null,
    body, more, err,
    h('div', { class: 'row actions' },
      place.editable ? h('a', { class: 'button', href: `#/${place.editRoute}/${seg(form.file)}`, id: 'edit' }, 'Edit') : null,
      historyButton,
      place.editable ? h('button', { type: 'button', class: 'danger', id: 'delete', on: { click: remove } }, 'Delete…')
        : null,
      h('a', { class: 'button secondary', href: back, id: 'back' }, 'Back')),
    history));
}

async function drawHistory(box, place, file) {
  clear(box).append(h('p', { class: 'muted' }, 'Loading…'));
  try {
    const data = await api('GET', `${place.base}/history/${seg(file)}`);
    clear(box).append(h('h3', {}, 'Earlier versions'));
    if (!data.versions.length) box.append(h('p', { class: 'empty', id: 'history-empty' }, 'No earlier versions yet: an edit here keeps the text it replaces.'));
    for (const v of data.versions) {
      const text = h('pre', { class: 'version-text', hidden: true }, v.content);
      const show = h('button', { type: 'button', class: 'secondary small', 'aria-expanded': 'false' }, 'Show');
      show.addEventListener('click', () => {
        text.hidden = !text.hidden;
        show.setAttribute('aria-expanded', text.hidden ? 'false' : 'true');
        show.textContent = text.hidden ? 'Show' : 'Hide';
      });
      const restore = h('button', { type: 'button', class: 'small version-restore', on: { click: () => confirmBox(
        `Make the version of ${when(v.saved_at)} the current text? The current text becomes a version itself.`, null,
        async () => {
          try {
            await api('POST', `${place.base}/restore-version/${seg(file)}`, { json: { version: v.id } });
            toast('Version restored');
            window.dispatchEvent(new HashChangeEvent('hashchange'));
          } catch (e) { toast(e.message); }
        }, { yes: 'Restore this version' }) } }, 'Restore');
      box.append(h('div', { class: 'version', dataset: { id: v.id } },
        h('div', { class: 'row spread' }, h('span', {}, `replaced ${when(v.saved_at)} by ${originWords(v.origin)} · ${bytes(v.size)}`),
          h('span', { class: 'row' }, show, restore)), text));
    }
  } catch (e) { clear(box).append(h('p', { class: 'error' }, e.message)); }
}

const FIELDS = ['file', 'name', 'description', 'type', 'body'];

export async function editorView(view, place, file, back) {
  const creating = !file;
  let form;
  try {
    form = creating
      ? { file: '', name: '', description: '', type: 'user', body: '', etag: null, last_modified: 0 }
      : await api('GET', `${place.base}/fields/${seg(file)}`);
  } catch (e) {
    if (e.status !== 422) throw e;
    return rawEditor(view, place, file, back, e.message);
  }
  const err = h('div', { class: 'error', id: 'form-error', role: 'alert' });
  const inputs = {
    file: h('input', { type: 'text', id: 'f-file', value: form.file, readOnly: !creating, placeholder: 'topic_name.md' }),
    name: h('input', { type: 'text', id: 'f-name', value: form.name }),
    description: h('input', { type: 'text', id: 'f-description', value: form.description }),
    type: h('select', { id: 'f-type' }, [...new Set([...TYPES, form.type])].map((t) =>
      h('option', { value: t, selected: t === form.type }, t))),
    body: h('textarea', { id: 'f-body', rows: 14, value: form.body }),
  };
  inputs.body.value = form.body;
  const errors = Object.fromEntries(FIELDS.map((k) => [k, h('p', { class: 'field-error', id: `err-${k}`, role: 'alert' })]));
  const clearErrors = () => {
    err.textContent = '';
    for (const k of FIELDS) {
      errors[k].textContent = '';
      inputs[k].removeAttribute('aria-invalid');
    }
  };
  const field = (key, label, hint) => h('label', {}, label, hint ? h('span', { class: 'hint' }, ` ${hint}`) : null,
    inputs[key], errors[key]);
  for (const k of FIELDS) inputs[k].setAttribute('aria-describedby', `err-${k}`);
  const preview = h('div', { class: 'preview md', id: 'f-preview' });
  const redraw = () => clear(preview).append(renderMarkdown(inputs.body.value));
  inputs.body.addEventListener('input', redraw);
  redraw();
  const saveButton = h('button', { type: 'submit', id: 'save' }, 'Save');

  const save = async (event) => {
    event.preventDefault();
    clearErrors();
    clearToast();
    const name = creating ? inputs.file.value.trim() : form.file;
    if (creating && !name) { showError('file', 'Give the file a name ending in .md, e.g. user_role.md.'); return; }
    const headers = creating ? { 'If-None-Match': '*' } : { 'If-Match': `"${form.etag}"` };
    saveButton.disabled = true;
    try {
      const saved = await api('PUT', `${place.base}/fields/${seg(name)}`, { headers,
        json: { name: inputs.name.value, description: inputs.description.value, type: inputs.type.value,
          body: inputs.body.value } });
      toast(`Saved ${saved.file}`);
      location.hash = `#/${place.route}/${seg(saved.file)}`;
    } catch (e) {
      const key = /^invalid_(\w+)$/.exec(e.code || '');
      if (key && errors[key[1]]) showError(key[1], e.message);
      else err.textContent = e.message;
    } finally { saveButton.disabled = false; }
  };
  const showError = (key, message) => {
    errors[key].textContent = message;
    inputs[key].setAttribute('aria-invalid', 'true');
    inputs[key].focus();
  };
  const cancel = creating ? back : `#/${place.route}/${seg(form.file)}`;
  view.append(h('section', { class: 'card editor' },
    h('h2', {}, creating ? 'New memory' : `Edit “${form.name}”`),
    creating ? null : h('p', { class: 'muted' }, `${place.label}/${form.file} · changed ${when(form.last_modified)}`),
    h('form', { id: 'memory-form', on: { submit: save }, novalidate: 'novalidate' },
      field('file', 'File'),
      field('name', 'Name'),
      field('description', 'Description', '(one line: what this memory holds)'),
      field('type', 'Type'),
      h('div', { class: 'split' },
        field('body', 'Text (markdown)'),
        h('div', {}, h('span', { class: 'label' }, 'Preview'), preview)),
      err,
      h('div', { class: 'row actions sticky', id: 'edit-actions' },
        place.editable ? saveButton : null,
        h('a', { class: 'button secondary', href: cancel, id: 'cancel' }, 'Cancel')))));
  inputs[creating ? 'file' : 'description'].setAttribute('autofocus', ''); // focused once on the page (app.js)
}

// A memory file whose frontmatter cannot be read (edited by hand, say): shown and saved as text,
// with the parser's message saying what to fix.
async function rawEditor(view, place, file, back, problem) {
  const current = await api('GET', `${place.base}/files/${seg(file)}`);
  const err = h('div', { class: 'error', id: 'form-error', role: 'alert' }, problem);
  const text = h('textarea', { id: 'f-raw', rows: 16, value: current.content, 'aria-label': 'File text' });
  text.value = current.content;
  const save = async (event) => {
    event.preventDefault();
    try {
      await api('PUT', `${place.base}/files/${seg(file)}`, { headers: { 'If-Match': `"${current.etag}"` },
        json: { content: text.value } });
      toast(`Saved ${file}`);
      location.hash = back;
    } catch (e) { err.textContent = e.message; }
  };
  view.append(h('section', { class: 'card editor' }, h('h2', {}, file),
    h('p', { class: 'hint' }, 'This file cannot be read as a memory. Fix it as text:'),
    h('form', { id: 'raw-form', on: { submit: save } }, text, err,
      h('div', { class: 'row actions sticky' }, h('button', { type: 'submit', id: 'save' }, 'Save'),
        h('a', { class: 'button secondary', href: back }, 'Back')))));
}
