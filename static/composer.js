// The message composer: text, message/note, steer/follow-up, tier, inline images (paste, drop,
// pick) and file attachments uploaded through a minted upload grant.

import { h, icon, iconButton, fmtBytes } from './dom.js';
import * as api from './api.js';

const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif']);
const MAX_IMAGES = 4;
const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
const MAX_ATTACHMENTS = 10;

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => {
      const s = String(r.result);
      resolve(s.slice(s.indexOf(',') + 1));
    };
    r.onerror = () => reject(r.error || new Error('cannot read the file'));
    r.readAsDataURL(file);
  });
}

/** `report (2).pdf` for the n-th collision of `report.pdf`. */
function numbered(name, n) {
  const dot = name.lastIndexOf('.');
  return dot > 0 ? `${name.slice(0, dot)} (${n})${name.slice(dot)}` : `${name} (${n})`;
}

/** Uploads one file through the grant flow; returns the attachment reference for the input. */
async function uploadFile(ws, cwd, file, grants) {
  const key = cwd || '';
  let grant = grants.get(key);
  if (!grant || grant.expiresAt - Date.now() < 30_000) {
    grant = await api.post(api.sessionsPath(ws, '/attachments/session'), cwd ? { cwd } : {});
    grants.set(key, grant);
  }
  const put = async (base, name) => fetch(`${base}${grant.uploadPath}/${encodeURIComponent(name)}`, {
    method: 'PUT',
    credentials: 'omit',
    headers: { Authorization: `Bearer ${grant.uploadToken}`, 'Content-Type': 'application/octet-stream' },
    body: file,
  });
  let base = grant.vmBaseUrl;
  let name = file.name || 'file';
  for (let n = 2; n < 50; n++) {
    let res;
    try {
      res = await put(base, name);
    } catch (e) {
      // The files endpoint is this server; if its advertised address is another origin than the
      // page (e.g. localhost vs 127.0.0.1), the page's CSP refuses it: use our own origin.
      if (base !== '' && new URL(base, location.href).origin !== location.origin) {
        base = '';
        n--;
        continue;
      }
      throw new api.ApiError(0, null, e);
    }
    const body = await res.json().catch(() => null);
    if (res.ok) {
      const ref = { path: body.path, name: body.name || name, bytes: body.bytes ?? file.size };
      if (file.type) ref.mimeType = file.type;
      return ref;
    }
    if (res.status === 409 && body?.error === 'exists') {
      name = numbered(file.name || 'file', n);
      continue;
    }
    throw new api.ApiError(res.status, body);
  }
  throw new Error('too many files with that name');
}

/**
 * opts: {
 *   ws, placeholder, label, kinds: ['message', 'note'], showBehavior, showTier, submitLabel,
 *   getUploadCwd(): string|undefined, onSubmit(payload) → Promise, onInterrupt() → Promise,
 *   dropZone: Element (defaults to the composer)
 * }
 * payload: { kind, text, behavior, tier, images: [{data, mimeType}], attachments: [...] }
 */
export function createComposer(opts) {
  const kinds = opts.kinds || ['message'];
  let kind = kinds[0];
  let images = [];
  let files = [];
  let running = false;
  let sending = false;
  const grants = new Map();

  const textarea = h('textarea', {
    class: 'composer-input', rows: 1, placeholder: opts.placeholder || 'Message…', 'aria-label': opts.label || 'Message',
  });
  const chips = h('div', { class: 'composer-files', hidden: true });
  const error = h('p', { class: 'composer-error', role: 'alert', hidden: true });
  const picker = h('input', { type: 'file', multiple: true, hidden: true, tabindex: -1, 'aria-hidden': 'true' });
  const attachBtn = iconButton('paperclip', 'Attach files or images', () => picker.click());

  const kindBtns = kinds.length > 1 ? kinds.map((k) => h('button', {
    type: 'button', class: 'seg', dataset: { kind: k }, 'aria-pressed': String(k === kind),
    title: k === 'note' ? 'Add a note to the timeline without starting a turn' : 'Send a message to the agent',
    onclick: () => setKind(k),
  }, k === 'note' ? 'Note' : 'Message')) : [];
  const kindGroup = kindBtns.length ? h('div', { class: 'segmented', role: 'group', 'aria-label': 'Send as' }, kindBtns) : null;

  const behavior = opts.showBehavior ? h('select', { class: 'select sm', 'aria-label': 'Delivery', title: 'Steer: the agent uses it right away. Follow-up: it waits until the current task is done.' },
    h('option', { value: 'steer', text: 'Steer' }),
    h('option', { value: 'follow_up', text: 'Follow-up' })) : null;
  const tier = opts.showTier !== false ? h('select', { class: 'select sm', 'aria-label': 'Model tier', title: 'Model tier (sticky for later messages)' },
    h('option', { value: '', text: 'Auto tier' }),
    h('option', { value: 'frontier', text: 'Frontier' }),
    h('option', { value: 'balanced', text: 'Balanced' }),
    h('option', { value: 'economy', text: 'Economy' })) : null;

  const stopBtn = h('button', { type: 'button', class: 'btn btn-stop', hidden: true, 'aria-label': 'Interrupt the agent', title: 'Interrupt the agent', onclick: interrupt },
    icon('stop'), h('span', { class: 'btn-text', text: 'Stop' }));
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary btn-send', 'aria-label': opts.submitLabel || 'Send', title: `${opts.submitLabel || 'Send'} (Enter)` },
    icon('send'), opts.submitLabel ? h('span', { class: 'btn-text', text: opts.submitLabel }) : null);

  const box = h('div', { class: 'composer-box' },
    chips,
    textarea,
    h('div', { class: 'composer-bar' },
      h('div', { class: 'composer-tools' }, attachBtn, kindGroup, behavior, tier),
      h('div', { class: 'composer-send' }, stopBtn, sendBtn)));
  const form = h('form', { class: 'composer', novalidate: true }, box, error, picker);

  function setKind(k) {
    kind = k;
    for (const b of kindBtns) b.setAttribute('aria-pressed', String(b.dataset.kind === k));
    if (behavior) behavior.hidden = k === 'note';
    if (tier) tier.hidden = k === 'note';
    textarea.placeholder = k === 'note' ? 'Write a note for the timeline…' : (opts.placeholder || 'Message…');
    textarea.setAttribute('aria-label', k === 'note' ? 'Note' : (opts.label || 'Message'));
    form.classList.toggle('is-note', k === 'note');
  }

  function showError(msg) {
    error.textContent = msg || '';
    error.hidden = !msg;
  }

  function autosize() {
    textarea.style.height = 'auto';
    textarea.style.height = `${Math.min(textarea.scrollHeight, 260)}px`;
  }

  function renderChips() {
    chips.replaceChildren();
    for (const img of images) {
      chips.append(h('div', { class: 'chip chip-image' },
        h('img', { src: img.url, alt: '' }),
        h('span', { class: 'chip-name', text: img.name }),
        iconButton('x', `Remove image ${img.name}`, () => {
          URL.revokeObjectURL(img.url);
          images = images.filter((x) => x !== img);
          renderChips();
        }, 'chip-x')));
    }
    for (const f of files) {
      chips.append(h('div', { class: `chip chip-file ${f.status}` },
        f.status === 'uploading' ? h('span', { class: 'spinner sm', 'aria-label': 'Uploading' }) : icon(f.status === 'error' ? 'alert' : 'file'),
        h('span', { class: 'chip-name', text: f.ref?.name || f.name, title: f.error || f.ref?.path || '' }),
        h('span', { class: 'chip-size', text: f.status === 'error' ? 'failed' : fmtBytes(f.bytes) }),
        iconButton('x', `Remove file ${f.name}`, () => {
          files = files.filter((x) => x !== f);
          renderChips();
        }, 'chip-x')));
    }
    chips.hidden = images.length + files.length === 0;
  }

  async function addFiles(list) {
    showError('');
    const problems = [];
    for (const file of list) {
      const isImage = IMAGE_TYPES.has(file.type);
      if (isImage && file.size <= MAX_IMAGE_BYTES && images.length < MAX_IMAGES) {
        try {
          const data = await readBase64(file);
          images.push({ data, mimeType: file.type, name: file.name || 'pasted image', url: URL.createObjectURL(file) });
        } catch {
          problems.push(`Cannot read ${file.name}.`);
        }
        renderChips();
        continue;
      }
      if (isImage) {
        problems.push(`Images over 5 MB, and any beyond ${MAX_IMAGES}, are attached as files.`);
      }
      if (files.length >= MAX_ATTACHMENTS) {
        problems.push(`At most ${MAX_ATTACHMENTS} attachments per message.`);
        break;
      }
      const entry = { name: file.name || 'file', bytes: file.size, status: 'uploading' };
      files.push(entry);
      renderChips();
      uploadFile(opts.ws, opts.getUploadCwd?.(), file, grants).then((ref) => {
        entry.ref = ref;
        entry.status = 'done';
        renderChips();
      }, (err) => {
        entry.status = 'error';
        entry.error = err?.userMessage || String(err);
        showError(`Upload of ${entry.name} failed: ${entry.error}`);
        renderChips();
      });
    }
    if (problems.length) showError([...new Set(problems)].join(' '));
  }

  async function submit() {
    if (sending) return;
    const text = textarea.value.trim();
    if (!text) {
      showError(kind === 'note' ? 'Write a note first.' : 'Write a message first.');
      textarea.focus();
      return;
    }
    if (files.some((f) => f.status === 'uploading')) {
      showError('Wait for the uploads to finish.');
      return;
    }
    if (files.some((f) => f.status === 'error')) {
      showError('Remove the files that failed to upload first.');
      return;
    }
    showError('');
    sending = true;
    sendBtn.disabled = true;
    form.classList.add('sending');
    try {
      await opts.onSubmit({
        kind,
        text,
        behavior: behavior?.value || 'steer',
        tier: tier?.value || undefined,
        images: images.map(({ data, mimeType }) => ({ data, mimeType })),
        attachments: files.map((f) => f.ref),
      });
      for (const img of images) URL.revokeObjectURL(img.url);
      images = [];
      files = [];
      textarea.value = '';
      autosize();
      renderChips();
    } catch (err) {
      showError(err?.userMessage || String(err));
    } finally {
      sending = false;
      sendBtn.disabled = false;
      form.classList.remove('sending');
    }
  }

  async function interrupt() {
    if (!opts.onInterrupt) return;
    stopBtn.disabled = true;
    try {
      await opts.onInterrupt();
    } catch (err) {
      showError(err?.userMessage || String(err));
    } finally {
      stopBtn.disabled = false;
    }
  }

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submit();
  });
  textarea.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey) {
      e.preventDefault();
      submit();
    }
  });
  textarea.addEventListener('input', () => {
    autosize();
    if (!error.hidden && textarea.value.trim()) showError('');
  });
  textarea.addEventListener('paste', (e) => {
    const list = [...(e.clipboardData?.files || [])];
    if (list.length) {
      e.preventDefault();
      addFiles(list);
    }
  });
  picker.addEventListener('change', () => {
    addFiles([...picker.files]);
    picker.value = '';
  });

  const zone = opts.dropZone || box;
  let dragDepth = 0;
  const hasFiles = (e) => [...(e.dataTransfer?.types || [])].includes('Files');
  zone.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    dragDepth++;
    zone.classList.add('dragging');
  });
  zone.addEventListener('dragover', (e) => {
    if (hasFiles(e)) e.preventDefault();
  });
  zone.addEventListener('dragleave', () => {
    dragDepth = Math.max(0, dragDepth - 1);
    if (!dragDepth) zone.classList.remove('dragging');
  });
  zone.addEventListener('drop', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    dragDepth = 0;
    zone.classList.remove('dragging');
    addFiles([...e.dataTransfer.files]);
  });

  setKind(kind);
  return {
    el: form,
    textarea,
    focus: () => textarea.focus(),
    setRunning(on) {
      running = on;
      stopBtn.hidden = !running || !opts.onInterrupt;
      form.classList.toggle('is-running', running);
    },
    setKinds(enabled) {
      for (const b of kindBtns) b.hidden = !enabled.includes(b.dataset.kind);
      if (kindGroup) kindGroup.hidden = enabled.length < 2;
      if (!enabled.includes(kind)) setKind(enabled[0]);
    },
    addFiles,
    setDisabled(on) {
      textarea.disabled = on;
      sendBtn.disabled = on;
      attachBtn.disabled = on;
    },
    /** Stop needs the server: it waits while the page cannot reach it. */
    setStopDisabled(on) {
      stopBtn.disabled = on;
    },
    showError,
  };
}
