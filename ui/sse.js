// Server-sent events over fetch(): EventSource cannot send the admin key's Authorization header.
// One follower per stream; it parses the text/event-stream format, reconnects after a dropped
// connection with Last-Event-ID (so the gateway replays what was missed), and stops for good when
// the caller says so (a refused key, a stream that ended on purpose).

const FIRST_RETRY_MS = 1000;
const MAX_RETRY_MS = 10_000;

/**
 * Follows `url` until closed.
 * - headers(): request headers for each (re)connection (the key may change between them);
 * - onAnswer(response): called for every non-2xx answer; return true to retry, false to stop;
 * - onEvent({ type, data, id }): one dispatched event;
 * - onStatus(status): 'connecting' | 'live' | 'retrying' | 'stopped';
 * - onEnd(): the server closed the stream; return true to stop there (a stream that ends on purpose).
 */
export function follow(url, { headers = () => ({}), onAnswer = async () => false, onEvent, onStatus = () => {}, onEnd = () => false }) {
  const ctrl = new AbortController();
  let lastId;
  let retryMs = FIRST_RETRY_MS;
  let closed = false;

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  async function run() {
    let delay = retryMs;
    while (!closed) {
      onStatus('connecting');
      let res;
      try {
        const h = { accept: 'text/event-stream', ...headers() };
        if (lastId !== undefined) h['last-event-id'] = lastId;
        res = await fetch(url, { headers: h, signal: ctrl.signal, cache: 'no-store' });
      } catch {
        if (closed) break;
        onStatus('retrying');
        await sleep(delay);
        delay = Math.min(delay * 2, MAX_RETRY_MS);
        continue;
      }
      if (!res.ok) {
        const again = await onAnswer(res);
        if (!again || closed) break;
        onStatus('retrying');
        await sleep(delay);
        delay = Math.min(delay * 2, MAX_RETRY_MS);
        continue;
      }
      onStatus('live');
      delay = retryMs;
      const feed = parser(
        (ev) => onEvent(ev),
        (id) => {
          lastId = id;
        },
        (ms) => {
          retryMs = ms;
          delay = ms;
        },
      );
      try {
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          feed(value);
        }
        if (onEnd()) break;
      } catch {
        // a dropped connection: reconnect below
      }
      if (closed) break;
      onStatus('retrying');
      await sleep(delay);
    }
    onStatus('stopped');
  }
  run();
  return {
    close() {
      closed = true;
      ctrl.abort();
    },
  };
}

/** The text/event-stream parser (WHATWG HTML §9.2.6): feed it text chunks as they arrive. */
export function parser(dispatch, setId, setRetry) {
  let buf = '';
  let data = [];
  let type = '';
  let id;
  const line = (l) => {
    if (l === '') {
      if (data.length) dispatch({ type: type || 'message', data: data.join('\n'), id });
      data = [];
      type = '';
      return;
    }
    if (l[0] === ':') return; // a comment (keep-alive)
    const colon = l.indexOf(':');
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'data') data.push(value);
    else if (field === 'event') type = value;
    else if (field === 'id' && !value.includes('\0')) {
      id = value;
      setId(value);
    } else if (field === 'retry' && /^\d+$/.test(value)) setRetry(Number(value));
  };
  let skipLF = false; // the chunk before ended with CR: an LF opening this one is its CRLF's half
  return (chunk) => {
    if (!chunk) return;
    if (skipLF && chunk[0] === '\n') chunk = chunk.slice(1);
    skipLF = false;
    buf += chunk;
    const re = /\r\n|\r|\n/g;
    let start = 0;
    let m;
    while ((m = re.exec(buf))) {
      line(buf.slice(start, m.index));
      start = re.lastIndex;
      if (m[0] === '\r' && start === buf.length) skipLF = true;
    }
    buf = buf.slice(start);
  };
}
