// Building DOM nodes without HTML strings: every text goes in through text nodes, so memory
// text can never become markup. `on` attaches listeners (no inline handlers anywhere).
const PROPS = new Set(['value', 'checked', 'disabled', 'selected', 'type', 'hidden', 'readOnly', 'multiple']);

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, val] of Object.entries(props || {})) {
    if (val === undefined || val === null || val === false) continue;
    if (key === 'on') {
      for (const [event, fn] of Object.entries(val)) el.addEventListener(event, fn);
    } else if (key === 'class') {
      el.className = val;
    } else if (key === 'dataset') {
      Object.assign(el.dataset, val);
    } else if (PROPS.has(key)) {
      el[key] = val;
    } else if (key === 'href') {
      el.setAttribute('href', safeHref(val));
    } else if (/^on/i.test(key)) {
      throw new Error('inline handlers are not allowed: ' + key);
    } else {
      el.setAttribute(key, String(val));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// Only links that cannot run code: in-page anchors, http(s) and mailto.
export function safeHref(url) {
  const text = String(url).trim();
  if (text.startsWith('#')) return text;
  try {
    const parsed = new URL(text, location.href);
    return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : '#';
  } catch {
    return '#';
  }
}

export function when(seconds) {
  if (!seconds) return '';
  const d = new Date(seconds * 1000);
  return d.toLocaleString();
}

// Who made a change, in words (the `origin` the server records on trash items and versions).
const ORIGIN = { assistant: 'the assistant, in a conversation', person: 'you, on this page', api: 'the HTTP API', cli: 'the command line', restore: 'a restore',
  import: 'an import', snapshot: 'a snapshot update', auto: 'auto memory, after a conversation' };
export function originWords(origin) { return ORIGIN[origin] || origin || 'unknown'; }

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

let toastTimer = 0;
let shownAt = 0;
// A short note at the bottom; `action` ({ label, run }) adds one button (e.g. Undo). A new toast,
// a new view and an error replace it: a stale "Saved" never stays beside a later failure.
export function toast(message, action) {
  const el = document.getElementById('toast');
  clear(el).append(h('span', { id: 'toast-text' }, message));
  if (action) {
    el.append(h('button', { type: 'button', class: 'small secondary', id: 'toast-action', on: { click: async () => {
      clearToast();
      await action.run();
    } } }, action.label));
  }
  el.classList.add('shown');
  shownAt = Date.now();
  clearTimeout(toastTimer);
  toastTimer = setTimeout(clearToast, action ? 10000 : 4000);
}

// On a new view: a toast shown just before the navigation it announces ("Saved") stays.
export function clearStaleToast(ms = 1000) {
  if (Date.now() - shownAt > ms) clearToast();
}

export function clearToast() {
  const el = document.getElementById('toast');
  if (!el) return;
  clearTimeout(toastTimer);
  el.classList.remove('shown');
  clear(el);
}

const FOCUSABLE = 'a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), ' +
  'textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';

// A modal dialog: a backdrop, focus moved in and kept inside (Tab wraps), Escape or a click on the
// backdrop closes it, the page behind is inert, focus returns where it was.
export function openDialog(title, content, { id = 'dialog', role = 'dialog', onClose } = {}) {
  const before = document.activeElement;
  const behind = [document.querySelector('header.top'), document.getElementById('main')].filter(Boolean);
  const heading = h('h2', { id: `${id}-title` }, title);
  const box = h('div', { class: 'dialog card', id, role, 'aria-modal': 'true', 'aria-labelledby': `${id}-title` },
    heading, content);
  const backdrop = h('div', { class: 'backdrop', id: `${id}-backdrop` }, box);
  let open = true;
  const close = () => {
    if (!open) return;
    open = false;
    backdrop.remove();
    for (const el of behind) el.inert = false;
    if (onClose) onClose();
    if (before && before.isConnected) before.focus();
  };
  backdrop.addEventListener('mousedown', (event) => { if (event.target === backdrop) close(); });
  box.addEventListener('keydown', (event) => {
    if (event.key === 'Escape') { event.preventDefault(); close(); return; }
    if (event.key !== 'Tab') return;
    const items = [...box.querySelectorAll(FOCUSABLE)].filter((el) => !el.hidden && el.offsetParent !== null);
    if (!items.length) return;
    const first = items[0];
    const last = items[items.length - 1];
    if (event.shiftKey && document.activeElement === first) { event.preventDefault(); last.focus(); }
    else if (!event.shiftKey && document.activeElement === last) { event.preventDefault(); first.focus(); }
  });
  document.body.append(backdrop);
  for (const el of behind) el.inert = true;
  const target = box.querySelector('input, textarea, select') || box.querySelector(FOCUSABLE);
  if (target) target.focus();
  return { close, box };
}

// A confirmation in a dialog (no window.confirm). With `word`, the person types it first (for
// what the trash cannot undo); without, a plain yes/no.
export function confirmBox(message, word, onConfirm, { yes = 'Yes, do it', hint } = {}) {
  const go = h('button', { type: 'button', id: 'confirm-go', class: 'danger', disabled: !!word }, yes);
  const cancel = h('button', { type: 'button', id: 'confirm-cancel', class: 'secondary' }, 'Cancel');
  const input = word ? h('input', { type: 'text', id: 'confirm-input', autocomplete: 'off', 'aria-label': `Type ${word}` })
    : null;
  const content = h('div', {}, h('p', {}, message), hint ? h('p', { class: 'hint' }, hint) : null,
    word ? h('p', { class: 'hint' }, 'Type ', h('code', {}, word), ' to confirm.') : null, input,
    h('div', { class: 'row' }, go, cancel));
  const dlg = openDialog('Please confirm', content, { id: 'confirm-box', role: 'alertdialog' });
  if (input) input.addEventListener('input', () => { go.disabled = input.value.trim() !== word; });
  if (!word) go.focus();
  cancel.addEventListener('click', dlg.close);
  go.addEventListener('click', async () => { go.disabled = true; dlg.close(); await onConfirm(); });
  return dlg;
}
