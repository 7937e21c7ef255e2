// A small, safe Markdown renderer.
//
// Safety model: the WHOLE source is HTML-escaped first (& < > " '), so no character of the input
// can open a tag or leave an attribute. Only then are a few constructs turned into markup built
// from fixed templates: paragraphs, line breaks, fenced and indented code, inline code, headings,
// block quotes, lists, rules, bold, italics, strike-through and links. Link targets must start
// with http:// or https:// and can contain no quote (quotes are already &quot; and the URL
// pattern stops at '&' unless it is an escaped ampersand).

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESC[c]);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w.+-]*)[^`]*$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)]) +(.*)$/;
const HEADING = /^ {0,3}(#{1,6}) +(.*?)(?: +#+)? *$/;
const RULE = /^ {0,3}([-*_])( *\1){2,} *$/;
const QUOTE = /^ {0,3}&gt; ?(.*)$/;

/** Markdown source → an HTML string that is safe to assign to innerHTML. */
export function renderMarkdown(src) {
  const text = escapeHtml(String(src ?? '').replace(/\r\n?/g, '\n').replace(/[\u0000\u0001]/g, ''));
  return blocks(text.split('\n'), 0);
}

function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (/^\s*$/.test(line)) {
      i++;
      continue;
    }
    const fence = line.match(FENCE);
    if (fence) {
      const marker = fence[1];
      const lang = fence[2];
      const body = [];
      i++;
      const closing = new RegExp(`^ {0,3}\\${marker[0]}{${marker.length},}\\s*$`);
      while (i < lines.length && !closing.test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++; // closing fence (or end of input)
      const langAttr = lang ? ` data-lang="${lang}"` : '';
      out.push(`<pre class="md-code"><code${langAttr}>${body.join('\n')}</code></pre>`);
      continue;
    }
    if (/^( {4}|\t)/.test(line) && depth === 0) {
      const body = [];
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || (/^\s*$/.test(lines[i]) && i + 1 < lines.length && /^( {4}|\t)/.test(lines[i + 1])))) {
        body.push(lines[i].replace(/^( {4}|\t)/, ''));
        i++;
      }
      out.push(`<pre class="md-code"><code>${body.join('\n')}</code></pre>`);
      continue;
    }
    const heading = line.match(HEADING);
    if (heading) {
      const level = Math.min(6, heading[1].length + 2);
      out.push(`<h${level} class="md-h">${inline(heading[2])}</h${level}>`);
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.push('<hr>');
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        body.push(lines[i].match(QUOTE)[1]);
        i++;
      }
      out.push(`<blockquote>${depth < 8 ? blocks(body, depth + 1) : inline(body.join(' '))}</blockquote>`);
      continue;
    }
    if (LIST_ITEM.test(line)) {
      const [html, next] = list(lines, i, depth);
      out.push(html);
      i = next;
      continue;
    }
    const para = [];
    while (i < lines.length && !/^\s*$/.test(lines[i]) && !startsBlock(lines[i])) {
      para.push(lines[i].trim());
      i++;
    }
    if (para.length === 0) {
      // A line that looks like a block start but was not consumed above: treat as text.
      para.push(lines[i].trim());
      i++;
    }
    out.push(`<p>${para.map(inline).join('<br>')}</p>`);
  }
  return out.join('');
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST_ITEM.test(line);
}

/** A list starting at `start`; items indented deeper become nested lists. */
function list(lines, start, depth) {
  const first = lines[start].match(LIST_ITEM);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let i = start;
  while (i < lines.length) {
    const m = lines[i].match(LIST_ITEM);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      items.push({ text: [m[3]], sub: [] });
      i++;
      continue;
    }
    if (m && m[1].length > indent && items.length && depth < 8) {
      const [html, next] = list(lines, i, depth + 1);
      items[items.length - 1].sub.push(html);
      i = next;
      continue;
    }
    if (!m && items.length && /^\s+\S/.test(lines[i]) && lines[i].match(/^ */)[0].length > indent) {
      items[items.length - 1].text.push(lines[i].trim());
      i++;
      continue;
    }
    break;
  }
  const startNum = ordered ? parseInt(first[2], 10) : 1;
  const tag = ordered ? 'ol' : 'ul';
  const startAttr = ordered && startNum !== 1 ? ` start="${startNum}"` : '';
  const body = items.map((it) => `<li>${it.text.map(inline).join('<br>')}${it.sub.join('')}</li>`).join('');
  return [`<${tag}${startAttr}>${body}</${tag}>`, i];
}

// URL characters: anything but whitespace, '<' and '&', except the escaped ampersand itself.
const URL_BODY = '(?:[^\\s<&]|&amp;)+';
const LINK = new RegExp(`\\[([^\\]\\n]+)\\]\\((https?://${URL_BODY}?)\\)`, 'g');
const AUTOLINK = new RegExp(`\\bhttps?://${URL_BODY}`, 'g');

function anchor(href, label) {
  return `<a href="${href}" target="_blank" rel="noopener noreferrer nofollow">${label}</a>`;
}

/** Inline formatting of one escaped line. */
export function inline(s) {
  const slots = [];
  const keep = (html) => `\u0000${slots.push(html) - 1}\u0001`;
  s = s.replace(/(`+)([^`\n]+?)\1(?!`)/g, (_, _t, code) => keep(`<code>${code}</code>`));
  s = s.replace(LINK, (_, label, href) => keep(anchor(href, emphasis(label))));
  s = s.replace(AUTOLINK, (url) => {
    let trail = '';
    const m = url.match(/(?:[.,:;!?)\]]|&amp;)+$/);
    if (m) {
      trail = m[0];
      url = url.slice(0, -trail.length);
    }
    return keep(anchor(url, url)) + trail;
  });
  s = emphasis(s);
  for (let n = 0; n < 4 && s.includes('\u0000'); n++) {
    s = s.replace(/\u0000(\d+)\u0001/g, (_, k) => slots[Number(k)]);
  }
  return s;
}

function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([^*]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w_])__(?=\S)([^_]*?\S)__(?![\w_])/g, '$1<strong>$2</strong>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>')
    .replace(/(^|[^\w_])_(?=[^\s_])([^_\n]*?[^\s_])_(?![\w_])/g, '$1<em>$2</em>')
    .replace(/~~(?=\S)([^~]*?\S)~~/g, '<del>$1</del>');
}
