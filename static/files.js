// Files: the workspace drive. Folders are browsed with breadcrumbs (`#/w/{ws}/files/a/b`, with
// `?open=NAME` for a file shown beside the listing); files download, and text, markdown (through
// the safe renderer) and images preview in place; files are uploaded by dropping them on the
// listing or with the file picker. Everything goes through `GET /v1/ws/{ws}/files` and
// `GET`/`PUT …/files/content`, and the server's errors are shown where they happened.

import { h, icon, relTime, fullTime, fmtBytes } from './dom.js';
import * as api from './api.js';
import { renderMarkdown } from './markdown.js';

/** Text larger than this is offered for download rather than shown. */
const PREVIEW_MAX = 512 * 1024;

export function filesPath(ws, rest = '') {
  return `/v1/ws/${encodeURIComponent(ws)}/files${rest}`;
}

/** The route of a drive file's bytes; `inline` for a preview. */
export function contentUrl(ws, path, inline) {
  const q = new URLSearchParams({ path });
  if (inline) q.set('inline', '1');
  return filesPath(ws, `/content?${q}`);
}

/** The lexical normal form of a drive path (`a/./b/../c` → `a/c`); null when it climbs out. */
export function normalisePath(p) {
  const out = [];
  for (const seg of String(p || '').split('/')) {
    if (!seg || seg === '.') continue;
    if (seg === '..') {
      if (!out.length) return null;
      out.pop();
    } else out.push(seg);
  }
  return out.join('/');
}

/** The console's route of drive folder `dir`, optionally with its file `open` shown. */
export function folderHref(ctx, dir, open) {
  const segs = String(dir || '').split('/').filter(Boolean).map(encodeURIComponent);
  return ctx.href(`/files${segs.length ? `/${segs.join('/')}` : ''}${open ? `?open=${encodeURIComponent(open)}` : ''}`);
}

/** The console's route of drive file `path`: its folder, with it shown. */
export function fileHref(ctx, path) {
  const i = path.lastIndexOf('/');
  return folderHref(ctx, i < 0 ? '' : path.slice(0, i), path.slice(i + 1));
}

const join = (dir, name) => (dir ? `${dir}/${name}` : name);

/** Reads an error answer of a raw `fetch` as the API client would. */
async function failure(res) {
  const data = await res.json().catch(() => null);
  return new api.ApiError(res.status, data);
}

export function filesView(ctx, rawDir, params) {
  const dir = normalisePath(rawDir) ?? '';
  let entries = [];
  let openName = params.get('open') || null;
  let previewToken = 0;
  let destroyed = false;

  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'Folder path' });
  const segs = dir ? dir.split('/') : [];
  crumbs.append(h('ol', null,
    h('li', null, h('a', { href: folderHref(ctx, ''), 'aria-current': segs.length ? null : 'page' }, icon('folder'), h('span', { text: 'Drive' }))),
    segs.map((seg, i) => h('li', null, h('a', {
      href: folderHref(ctx, segs.slice(0, i + 1).join('/')),
      'aria-current': i === segs.length - 1 ? 'page' : null,
      text: seg,
    })))));

  const errorEl = h('p', { class: 'form-error files-error', role: 'alert', hidden: true });
  const status = h('p', { class: 'small muted files-status', role: 'status', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const table = h('table', { class: 'files-table' },
    h('caption', { class: 'sr-only', text: dir ? `Files in ${dir}` : 'Files in the drive' }),
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', text: 'Name' }),
      h('th', { scope: 'col', class: 'num', text: 'Size' }),
      h('th', { scope: 'col', class: 'when', text: 'Modified' }),
      h('th', { scope: 'col', class: 'act' }, h('span', { class: 'sr-only', text: 'Download' })))),
    tbody);
  const listing = h('div', { class: 'files-list', dataset: { loaded: '' } },
    h('div', { class: 'files-table-wrap' }, table),
    h('p', { class: 'files-drop-hint small muted' }, icon('upload'), h('span', { text: 'Drop files here to upload them into this folder.' })));
  const preview = h('section', { class: 'files-preview panel', 'aria-label': 'Preview', hidden: true });

  const picker = h('input', { type: 'file', multiple: true, hidden: true, id: 'files-picker' });
  picker.addEventListener('change', () => {
    if (picker.files.length) upload([...picker.files]);
    picker.value = '';
  });
  const uploadBtn = h('button', { type: 'button', class: 'btn btn-primary sm', id: 'files-upload', 'aria-label': 'Upload files', onclick: () => picker.click() },
    icon('upload'), h('span', { text: 'Upload' }));
  const refreshBtn = h('button', { type: 'button', class: 'btn sm', 'aria-label': 'Refresh', title: 'Refresh', onclick: () => load() }, icon('refresh'));

  const root = h('section', { class: 'view files-view', dataset: { dir } },
    h('header', { class: 'page-head' },
      h('div', { class: 'grow' }, h('h1', { text: 'Files' }), crumbs),
      h('div', { class: 'files-actions' }, refreshBtn, uploadBtn, picker)),
    errorEl, status,
    h('div', { class: 'files-body' }, listing, preview));

  function showError(text) {
    errorEl.textContent = text || '';
    errorEl.hidden = !text;
  }

  // -------------------------------------------------------------------------------------------
  // The listing

  function row(e) {
    const when = e.modifiedAt ? h('span', { title: fullTime(e.modifiedAt), text: relTime(e.modifiedAt) }) : '';
    if (e.kind === 'dir') {
      return h('tr', { class: 'file-row is-dir', dataset: { path: e.path, kind: 'dir' } },
        h('td', { class: 'name' }, h('a', { href: folderHref(ctx, e.path) }, icon('folder'), h('span', { text: e.name }))),
        h('td', { class: 'num muted', text: '—' }),
        h('td', { class: 'when small muted' }, when),
        h('td', { class: 'act' }));
    }
    const open = h('button', { type: 'button', class: 'file-open', 'aria-pressed': String(e.name === openName), onclick: () => openFile(e) },
      icon(e.preview === 'image' ? 'image' : 'file'), h('span', { text: e.name }));
    return h('tr', { class: 'file-row', dataset: { path: e.path, kind: 'file' } },
      h('td', { class: 'name' }, open),
      h('td', { class: 'num small', text: fmtBytes(e.size) }),
      h('td', { class: 'when small muted' }, when),
      h('td', { class: 'act' }, h('a', { class: 'icon-btn file-download', href: contentUrl(ctx.ws, e.path), download: e.name, 'aria-label': `Download ${e.name}`, title: `Download ${e.name}` }, icon('download'))));
  }

  function render(truncated) {
    const rows = entries.map(row);
    if (dir) {
      const up = segs.slice(0, -1).join('/');
      rows.unshift(h('tr', { class: 'file-row is-up' },
        h('td', { class: 'name', colspan: 4 }, h('a', { href: folderHref(ctx, up), 'aria-label': '.. (the parent folder)' }, icon('chevronLeft'), h('span', { text: '..' })))));
    }
    if (!entries.length) {
      rows.push(h('tr', null, h('td', { colspan: 4, class: 'muted small empty-row', text: 'This folder is empty. Drop files here or use Upload.' })));
    }
    if (truncated) {
      rows.push(h('tr', null, h('td', { colspan: 4, class: 'muted small', text: `Only the first ${entries.length} entries are listed.` })));
    }
    tbody.replaceChildren(...rows);
  }

  async function load() {
    try {
      const res = await api.get(filesPath(ctx.ws, `?${new URLSearchParams({ path: dir })}`));
      if (destroyed) return;
      entries = res.entries || [];
      render(res.truncated);
      listing.dataset.loaded = String(Date.now());
      if (openName) {
        const e = entries.find((x) => x.kind === 'file' && x.name === openName);
        if (e) openFile(e, true);
        else closePreview();
      }
    } catch (err) {
      if (destroyed) return;
      entries = [];
      tbody.replaceChildren(h('tr', null, h('td', { colspan: 4, class: 'empty-row' },
        h('p', { class: 'form-error', text: api.describeError(err) }),
        dir && h('a', { href: folderHref(ctx, ''), text: 'Back to the drive' }))));
      listing.dataset.loaded = 'error';
    }
  }

  // -------------------------------------------------------------------------------------------
  // The preview

  function markOpen() {
    for (const b of tbody.querySelectorAll('.file-open')) {
      b.setAttribute('aria-pressed', String(b.closest('tr').dataset.path === join(dir, openName || '')));
    }
  }

  function closePreview() {
    openName = null;
    previewToken++;
    preview.hidden = true;
    preview.replaceChildren();
    delete preview.dataset.path;
    history.replaceState(null, '', folderHref(ctx, dir));
    markOpen();
  }

  async function openFile(e, quiet) {
    const token = ++previewToken;
    openName = e.name;
    if (!quiet) history.replaceState(null, '', folderHref(ctx, dir, e.name));
    markOpen();
    const body = h('div', { class: 'preview-body' }, h('div', { class: 'spinner', role: 'status', 'aria-label': 'Loading' }));
    const closeBtn = h('button', { type: 'button', class: 'icon-btn', 'aria-label': 'Close preview', title: 'Close preview', onclick: () => {
      closePreview();
      tbody.querySelector(`tr[data-path="${CSS.escape(e.path)}"] .file-open`)?.focus();
    } }, icon('x'));
    preview.replaceChildren(
      h('div', { class: 'preview-head' },
        h('h2', { class: 'preview-title', text: e.name }),
        h('a', { class: 'btn sm', href: contentUrl(ctx.ws, e.path), download: e.name }, icon('download'), h('span', { text: 'Download' })),
        closeBtn),
      h('p', { class: 'small muted', text: `${fmtBytes(e.size)}${e.modifiedAt ? ` · ${fullTime(e.modifiedAt)}` : ''}${e.type ? ` · ${e.type}` : ''}` }),
      body);
    preview.dataset.path = e.path;
    preview.dataset.state = 'loading';
    preview.hidden = false;
    const done = (state, ...children) => {
      if (token !== previewToken) return;
      body.replaceChildren(...children);
      preview.dataset.state = state;
    };
    if (e.preview === 'image') {
      const img = h('img', { class: 'preview-img', alt: e.name, src: contentUrl(ctx.ws, e.path, true) });
      img.addEventListener('load', () => done('ready', img));
      img.addEventListener('error', () => done('error', h('p', { class: 'form-error', text: 'This image could not be shown.' })));
      return;
    }
    if (e.preview !== 'text' && e.preview !== 'markdown') {
      done('none', h('p', { class: 'muted', text: 'No preview for this type of file: download it to open it.' }));
      return;
    }
    if (e.size > PREVIEW_MAX) {
      done('none', h('p', { class: 'muted', text: `Too large to preview (${fmtBytes(e.size)}): download it to read it.` }));
      return;
    }
    try {
      const res = await fetch(contentUrl(ctx.ws, e.path, true), { credentials: 'same-origin', cache: 'no-store' });
      if (!res.ok) throw await failure(res);
      const text = await res.text();
      if (e.preview === 'markdown') {
        const md = h('div', { class: 'md preview-md' });
        md.innerHTML = renderMarkdown(text);
        done('ready', md);
      } else {
        done('ready', h('pre', { class: 'code-block mono small preview-text', tabindex: 0, text }));
      }
    } catch (err) {
      done('error', h('p', { class: 'form-error', text: err instanceof api.ApiError ? api.describeError(err) : api.describeError(new api.ApiError(0, null, err)) }));
    }
  }

  // -------------------------------------------------------------------------------------------
  // Uploads

  async function upload(files) {
    showError('');
    const failed = [];
    let written = 0;
    uploadBtn.disabled = true;
    listing.classList.add('uploading');
    for (const file of files) {
      status.textContent = `Uploading ${file.name}…`;
      try {
        const res = await fetch(contentUrl(ctx.ws, join(dir, file.name)), {
          method: 'PUT',
          credentials: 'same-origin',
          headers: { 'Content-Type': 'application/octet-stream' },
          body: file,
        });
        if (!res.ok) throw await failure(res);
        written++;
      } catch (err) {
        failed.push(`${file.name}: ${err instanceof api.ApiError ? api.describeError(err) : 'the upload failed.'}`);
      }
    }
    if (destroyed) return;
    uploadBtn.disabled = false;
    listing.classList.remove('uploading');
    status.textContent = written ? `Uploaded ${written} file${written === 1 ? '' : 's'}.` : '';
    showError(failed.length ? `Not uploaded: ${failed.join(' ')}` : '');
    await load();
  }

  const carriesFiles = (e) => [...(e.dataTransfer?.types || [])].includes('Files');
  let depth = 0;
  listing.addEventListener('dragenter', (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    depth++;
    listing.classList.add('dropping');
  });
  listing.addEventListener('dragover', (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  listing.addEventListener('dragleave', () => {
    depth = Math.max(0, depth - 1);
    if (!depth) listing.classList.remove('dropping');
  });
  listing.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0;
    listing.classList.remove('dropping');
    const files = [...(e.dataTransfer?.files || [])];
    if (files.length) upload(files);
  });

  load();
  return {
    el: root,
    destroy() {
      destroyed = true;
      previewToken++;
    },
  };
}
