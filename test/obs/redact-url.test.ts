// redactUrl masks user info in NATS URLs and comma-separated server lists, including passwords
// that hold the characters a URL parser would cut at, and leaves credential-free text alone.

import { describe, expect, it } from 'vitest';
import { redactUrl } from '../../src/obs/redact-url.ts';

describe('redactUrl', () => {
  it('masks user and password, or a token, and keeps scheme, host and port', () => {
    expect(redactUrl('nats://trainer:s3cret@nats-1:4222')).toBe('nats://***@nats-1:4222');
    expect(redactUrl('nats://TOKEN123@127.0.0.1:4222')).toBe('nats://***@127.0.0.1:4222');
    expect(redactUrl('tls://u:p@[::1]:4222')).toBe('tls://***@[::1]:4222');
  });

  it('masks every server of a list and leaves the ones without user info as they are', () => {
    expect(redactUrl('nats://a:1@n1:4222,nats://n2:4222, nats://b:2@n3:4222')).toBe('nats://***@n1:4222,nats://n2:4222, nats://***@n3:4222');
    expect(redactUrl('nats://gw:pw@n1:4222,n2:4222,n3:4222')).toBe('nats://***@n1:4222,n2:4222,n3:4222');
  });

  it('keeps passwords with `@`, `,`, `/` or `:` inside the masked part', () => {
    for (const pass of ['p@ss', 'p,ss', 'p/ss', 'p:ss', 'a@b,c/d:e']) {
      const out = redactUrl(`nats://user:${pass}@host:4222,nats://host2:4222`);
      expect(out, pass).toBe('nats://***@host:4222,nats://host2:4222');
      expect(out, pass).not.toContain(pass);
    }
  });

  it('masks user info without a scheme, erring towards masking more', () => {
    expect(redactUrl('user:pw@host:4222')).toBe('***@host:4222');
    expect(redactUrl('host1:4222,user:pw@host2:4222')).not.toContain('pw');
  });

  it('leaves text without user info untouched', () => {
    for (const t of ['nats://127.0.0.1:4222', 'nats://n1:4222,nats://n2:4222', 'host:4222', '', 'http://gw:30000/v1/rl']) {
      expect(redactUrl(t)).toBe(t);
    }
  });
});
