// The trash: what was deleted lately (memories and facts), each deletion restorable until the
// server's `limits.trash_days` run out, or removed for good.
import { api, seg } from './api.js';
import { clear, confirmBox, h, originWords, toast, when } from './dom.js';

export async function trashView(view, sources) {
  for (const source of sources) {
    const box = h('section', { class: 'card trash', dataset: { source: source.key } });
    view.append(box);
    await drawSource(box, source);
  }
}

async function drawSource(box, source) {
  const data = await api('GET', `${source.base}/trash`);
  const err = h('div', { class: 'error', role: 'alert' });
  const again = () => drawSource(box, source).catch((e) => { err.textContent = e.message; });
  const empty = data.items.length ? h('button', { type: 'button', class: 'danger small', id: `empty-${source.key}`,
    on: { click: () => confirmBox(`Remove everything in the ${source.title.toLowerCase()} trash for good?`, 'empty',
      async () => {
        try { await api('DELETE', `${source.base}/trash`); toast('Trash emptied'); await again(); }
        catch (e) { err.textContent = e.message; }
      }) } }, 'Empty trash…') : null;
  const list = h('div', { class: 'trash-list' });
  for (const item of data.items) list.append(itemRow(source, item, err, again));
  if (!data.items.length) list.append(h('p', { class: 'empty' }, 'Nothing deleted lately.'));
  clear(box).append(h('div', { class: 'row spread' },
    h('h2', {}, `Deleted ${source.title.toLowerCase()}`, h('span', { class: 'muted' }, ` · ${data.count}`)), empty),
  h('p', { class: 'hint' }, `Deleted ${source.title.toLowerCase()} are kept here for ${data.keep_days} days, then removed for good.`),
  err, list);
}

function itemRow(source, item, err, again) {
  const names = item.files.map((f) => source.what === 'fact' ? (f.description || f.name || f.file) : (f.name || f.file));
  const restore = async () => {
    try {
      const done = await api('POST', `${source.base}/trash/${seg(item.id)}/restore`);
      toast(`Restored ${done.restored.length} ${source.what}${done.restored.length === 1 ? '' : 's'}`);
      await again();
    } catch (e) { err.textContent = e.message; }
  };
  const purge = () => confirmBox(`Remove “${names.join('”, “')}” for good? This cannot be undone.`, null, async () => {
    try { await api('DELETE', `${source.base}/trash/${seg(item.id)}`); toast('Removed for good'); await again(); }
    catch (e) { err.textContent = e.message; }
  }, { yes: 'Remove for good' });
  return h('article', { class: 'trash-item', dataset: { id: item.id } },
    h('div', { class: 'row spread' },
      h('div', {}, h('ul', { class: 'trash-files' }, names.map((n) => h('li', {}, n))),
        h('p', { class: 'muted' }, `deleted ${when(item.deleted_at)} by ${originWords(item.origin)} · kept until ${when(item.expires_at)}`)),
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'small trash-restore', on: { click: restore } }, 'Restore'),
        h('button', { type: 'button', class: 'small secondary trash-purge', on: { click: purge } }, 'Delete for good'))));
}
