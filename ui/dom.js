// Building DOM nodes from data: text always goes in as text (never as HTML), so nothing an engine
// or a request reports can inject markup into the page.

/** el('td', { class: 'x', dataset: { id } }, 'text', child, ...) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'dataset') Object.assign(node.dataset, v);
    else if (k === 'style') Object.assign(node.style, v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== undefined && c !== null && c !== false) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** Sets a node's text only when it differs (keeps large tables cheap to refresh). */
export function setText(node, text) {
  const t = text ?? '';
  if (node.textContent !== t) node.textContent = t;
}

/** Sets a data attribute only when it differs; null or undefined removes it. */
export function setData(node, key, value) {
  if (value === undefined || value === null) delete node.dataset[key];
  else if (node.dataset[key] !== value) node.dataset[key] = value;
}

export function ms(n) {
  if (n === undefined || n === null) return '';
  return n < 1000 ? `${Math.round(n)} ms` : `${(n / 1000).toFixed(n < 10_000 ? 2 : 1)} s`;
}
