// Export (JSON bundle or zip), import (merge or replace), and "forget everything" (into the trash,
// or for good) behind a typed confirmation. Downloads go through fetch (the credentials are headers, not cookies).
import { api } from './api.js';
import { confirmBox, h, toast } from './dom.js';

export function transferView(view, userBase, user) {
  const result = h('pre', { class: 'result', id: 'transfer-result' });
  const err = h('div', { class: 'error', id: 'transfer-error', role: 'alert' });
  const download = async (format) => {
    err.textContent = '';
    try {
      const resp = await api('GET', `${userBase}/memory/export?format=${format}`, { raw: true });
      const blob = await resp.blob();
      const link = h('a', { id: `download-${format}`, download: `memory-${user}.${format}` });
      link.href = URL.createObjectURL(blob);
      document.body.append(link);
      link.click();
      setTimeout(() => { URL.revokeObjectURL(link.href); link.remove(); }, 1000);
    } catch (e) { err.textContent = e.message; }
  };
  const fileIn = h('input', { type: 'file', id: 'import-file', accept: '.json,.zip,application/json,application/zip' });
  const mode = h('select', { id: 'import-mode' }, h('option', { value: 'merge' }, 'merge: add and overwrite'),
    h('option', { value: 'replace' }, 'replace: clear first'));
  const doImport = async (event) => {
    event.preventDefault();
    err.textContent = '';
    result.textContent = '';
    const file = fileIn.files[0];
    if (!file) { err.textContent = 'choose an exported .json or .zip file first'; return; }
    const zip = file.name.toLowerCase().endsWith('.zip');
    const send = async (dry) => api('POST', `${userBase}/memory/import?mode=${mode.value}${dry ? '&dry_run=true' : ''}`, {
      body: await file.arrayBuffer(), headers: { 'Content-Type': zip ? 'application/zip' : 'application/json' } });
    const counts = (report) => report.places.map((p) =>
      `${p.path}: ${p.created} created, ${p.updated} updated, ${p.unchanged} unchanged, ${p.cleared} cleared`)
      .join('\n') || 'nothing to import';
    const run = async () => {
      try {
        const report = await send(false);
        result.textContent = counts(report);
        toast(`Imported ${report.written} files`);
      } catch (e) { err.textContent = e.message; }
    };
    if (mode.value !== 'replace') { await run(); return; }
    try { // a replacing import: show what it would do first (nothing is written by the dry run)
      const preview = await send(true);
      confirmBox('Replace your memory with this file? What it removes or overwrites goes to the trash.', null, run,
        { yes: 'Replace', hint: counts(preview) });
    } catch (e) { err.textContent = e.message; }
  };
  // Forget everything: into each place's trash (restorable); "for good" purges the trash and history too.
  const forget = (purge) => confirmBox(purge
    ? 'Delete everything for good: every memory, fact and the profile of this user, with the trash and the history. This cannot be undone.'
    : 'Forget everything: every memory, fact and the profile of this user goes to the trash.',
  purge ? 'delete for good' : 'forget', async () => {
    try {
      const done = await api('DELETE', `${userBase}/memory${purge ? '?purge=true' : ''}`);
      result.textContent = done.in_trash
        ? `Forgot ${done.deleted_files} files in ${done.places.length} places. They are in the trash for ${done.keep_days} days: restore them from Trash.`
        : `Deleted ${done.deleted_files} files in ${done.places.length} places for good.`;
      toast(done.in_trash ? 'Everything forgotten (restorable from Trash)' : 'Everything deleted for good');
    } catch (e) { err.textContent = e.message; }
  }, { yes: purge ? 'Delete for good' : 'Forget everything',
    hint: purge ? 'Nothing can be restored afterwards.' : 'You can restore it from Trash until the trash drops it.' });
  view.append(h('section', { class: 'card' }, h('h2', {}, 'Export'),
    h('p', { class: 'hint' }, 'Everything the assistant remembers about you, as one file you can keep or import later.'),
    h('div', { class: 'row' },
      h('button', { type: 'button', id: 'export-json', on: { click: () => download('json') } }, 'Export JSON'),
      h('button', { type: 'button', id: 'export-zip', on: { click: () => download('zip') } }, 'Export zip'))),
  h('section', { class: 'card' }, h('h2', {}, 'Import'),
    h('form', { class: 'row', id: 'import-form', on: { submit: doImport } }, fileIn, mode,
      h('button', { type: 'submit', id: 'import-go' }, 'Import'))),
  h('section', { class: 'card danger-zone' }, h('h2', {}, 'Forget everything'),
    h('p', { class: 'hint' }, 'Forgets all of your memory (agent memories, facts and profile) into the trash, '
      + 'where it can be restored for a while; "Delete for good" also empties the trash and the history.'),
    h('div', { class: 'row' },
      h('button', { type: 'button', class: 'danger', id: 'forget', on: { click: () => forget(false) } }, 'Forget everything…'),
      h('button', { type: 'button', class: 'danger', id: 'forget-purge', on: { click: () => forget(true) } },
        'Delete for good…'))),
  err, result);
}
