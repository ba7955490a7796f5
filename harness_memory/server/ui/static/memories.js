// Agent memories of one place: listed by type (paged: a place may hold thousands), opened in a
// form (frontmatter fields + markdown body with a live preview), saved, deleted. The server
// composes and validates the file, so a bad edit shows the tools' own message.
import { api, seg } from './api.js';
import { bytes, clear, confirmBox, h, toast, when } from './dom.js';
import { renderMarkdown } from './md.js';

export const TYPES = ['user', 'feedback', 'project', 'reference'];
const TYPE_LABEL = { user: 'About you', feedback: 'How you want things done', project: 'Projects', reference: 'References' };
const PAGE = 50;

export function listPath(place, state) {
  const params = new URLSearchParams({ limit: String(PAGE), offset: String(state.page * PAGE), order: 'type' });
  if (state.type) params.set('type', state.type);
  if (state.query.trim()) params.set('q', state.query.trim());
  return `${place.base}?${params}`;
}

// The server filters and pages (a place may hold thousands of memories): one page of rows in the DOM.
export async function memoriesView(view, place, first) {
  const state = { type: '', query: '', page: 0 };
  let data = (first && await first) || await api('GET', listPath(place, state));
  const total = Object.values(data.types || {}).reduce((a, b) => a + b, 0);
  const list = h('div', { id: 'memory-list' });
  const pager = h('div', { class: 'pager', id: 'pager' });
  const search = h('input', { type: 'search', id: 'memory-filter', placeholder: 'Filter by name or description',
    'aria-label': 'Filter memories' });
  const chips = h('div', { class: 'chips', role: 'tablist' });
  const err = h('div', { class: 'error', role: 'alert' });
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

  const draw = () => {
    clear(list);
    let lastType = null;
    for (const f of data.files) {
      if (f.type !== lastType) {
        list.append(h('h3', { class: 'type-head' }, TYPE_LABEL[f.type] || f.type || 'Other',
          h('span', { class: 'muted' }, ` · ${f.type}`)));
        lastType = f.type;
      }
      list.append(row(place, f));
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
    for (const chip of chips.children) chip.classList.toggle('active', chip.dataset.type === state.type);
  };

  for (const t of ['', ...TYPES]) {
    chips.append(h('button', { type: 'button', class: 'chip', dataset: { type: t }, role: 'tab',
      on: { click: () => { state.type = t; state.page = 0; reload(); } } },
    t ? `${t} (${(data.types || {})[t] || 0})` : `all (${total})`));
  }
  let typing = 0;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.query = search.value; state.page = 0; reload(); }, 200);
  });
  view.append(h('section', { class: 'card' },
    h('div', { class: 'row spread' },
      h('h2', {}, place.title, h('span', { class: 'muted', id: 'memory-count' }, ` · ${total} memories`),
        place.picker ? [' ', place.picker()] : null),
      place.editable ? h('a', { class: 'button', href: `#/${place.route}/new`, id: 'new-memory' }, 'New memory') : null),
    h('p', { class: 'hint' }, place.hint),
    h('div', { class: 'row' }, chips, search), err, list, pager, indexBox(place)));
  draw();
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

function row(place, f) {
  return h('article', { class: 'memory', dataset: { file: f.file } },
    h('div', { class: 'row spread' },
      h('a', { class: 'memory-name', href: `#/${place.route}/${encodeURIComponent(f.file)}` }, f.name),
      h('span', { class: 'muted' }, `${f.type} · ${bytes(f.size)} · changed ${when(f.updated_at)}`)),
    h('p', { class: 'memory-desc' }, f.description));
}

export async function editorView(view, place, file, back) {
  const creating = !file;
  let form;
  try {
    form = creating
      ? { file: '', name: '', description: '', type: 'user', body: '', etag: null, last_modified: 0 }
      : await api('GET', `${place.base}/fields/${seg(file)}`);
  } catch (e) {
    if (e.status !== 422) throw e;
    return rawEditor(view, place, file, back, e.message); // a file the form cannot read: fix it as text
  }
  const err = h('div', { class: 'error', id: 'form-error', role: 'alert' });
  const fileIn = h('input', { type: 'text', id: 'f-file', value: form.file, readOnly: !creating,
    placeholder: 'topic_name.md' });
  const nameIn = h('input', { type: 'text', id: 'f-name', value: form.name });
  const descIn = h('input', { type: 'text', id: 'f-description', value: form.description });
  const typeIn = h('select', { id: 'f-type' }, [...new Set([...TYPES, form.type])].map((t) =>
    h('option', { value: t, selected: t === form.type }, t)));
  const bodyIn = h('textarea', { id: 'f-body', rows: 14, value: form.body });
  bodyIn.value = form.body;
  const preview = h('div', { class: 'preview md', id: 'f-preview' });
  const redraw = () => clear(preview).append(renderMarkdown(bodyIn.value));
  bodyIn.addEventListener('input', redraw);
  redraw();
  let etag = form.etag;

  const save = async (event) => {
    event.preventDefault();
    err.textContent = '';
    const name = creating ? fileIn.value.trim() : form.file;
    const headers = creating ? { 'If-None-Match': '*' } : { 'If-Match': `"${etag}"` };
    try {
      const saved = await api('PUT', `${place.base}/fields/${seg(name)}`, { headers,
        json: { name: nameIn.value, description: descIn.value, type: typeIn.value, body: bodyIn.value } });
      toast(`Saved ${saved.file}`);
      location.hash = back;
    } catch (e) {
      err.textContent = e.message;
    }
  };
  const remove = () => {
    view.append(confirmBox(`Delete the memory “${form.name}”? The assistant will no longer know it.`, 'delete',
      async () => {
        try {
          await api('DELETE', `${place.base}/files/${seg(form.file)}`);
          toast(`Deleted ${form.file}`);
          location.hash = back;
        } catch (e) { err.textContent = e.message; }
      }));
  };
  view.append(h('section', { class: 'card editor' },
    h('h2', {}, creating ? 'New memory' : form.name),
    creating ? null : h('p', { class: 'muted' }, `${place.label}/${form.file} · changed ${when(form.last_modified)}`),
    h('form', { id: 'memory-form', on: { submit: save } },
      h('label', {}, 'File', fileIn),
      h('label', {}, 'Name', nameIn),
      h('label', {}, 'Description (one line: what this memory holds)', descIn),
      h('label', {}, 'Type', typeIn),
      h('div', { class: 'split' },
        h('label', {}, 'Body (markdown)', bodyIn),
        h('div', {}, h('span', { class: 'label' }, 'Preview'), preview)),
      err,
      h('div', { class: 'row' },
        place.editable ? h('button', { type: 'submit', id: 'save' }, 'Save') : null,
        !creating && place.editable ? h('button', { type: 'button', class: 'danger', id: 'delete',
          on: { click: remove } }, 'Delete') : null,
        h('a', { class: 'button secondary', href: back, id: 'cancel' }, 'Back')))));
}

// A memory file whose frontmatter cannot be read (edited by hand, say): shown and saved as text,
// with the parser's message saying what to fix.
async function rawEditor(view, place, file, back, problem) {
  const current = await api('GET', `${place.base}/files/${seg(file)}`);
  const err = h('div', { class: 'error', id: 'form-error', role: 'alert' }, problem);
  const text = h('textarea', { id: 'f-raw', rows: 16, value: current.content });
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
      h('div', { class: 'row' }, h('button', { type: 'submit', id: 'save' }, 'Save'),
        h('a', { class: 'button secondary', href: back }, 'Back')))));
}
