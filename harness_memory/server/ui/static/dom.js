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

export function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

let toastTimer = 0;
export function toast(message) {
  const el = document.getElementById('toast');
  el.textContent = message;
  el.classList.add('shown');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('shown'), 4000);
}

// A confirmation inside the page (no window.confirm): the person types the word shown.
export function confirmBox(message, word, onConfirm) {
  const input = h('input', { type: 'text', id: 'confirm-input', autocomplete: 'off', 'aria-label': `Type ${word}` });
  const go = h('button', { type: 'button', id: 'confirm-go', class: 'danger', disabled: true }, 'Yes, do it');
  const box = h('div', { class: 'confirm card', id: 'confirm-box', role: 'alertdialog' },
    h('p', {}, message), h('p', { class: 'hint' }, 'Type ', h('code', {}, word), ' to confirm.'), input,
    h('div', { class: 'row' }, go,
      h('button', { type: 'button', id: 'confirm-cancel', on: { click: () => box.remove() } }, 'Cancel')));
  input.addEventListener('input', () => { go.disabled = input.value.trim() !== word; });
  go.addEventListener('click', async () => { go.disabled = true; box.remove(); await onConfirm(); });
  return box;
}
