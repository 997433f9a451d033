// natsConnectOptions: the server list reaches nats.js without user info, credentials become one
// authenticator (URL user:pass, URL token, user + password file, token file, nkey seed, creds),
// TLS files are checked, the inbox prefix is passed on, and every refusal names files and
// settings but never a secret. The
// logins themselves are tested against real servers in test/gateway/nats-credentials.integration.test.ts.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nkeys } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import { natsConnectOptions, NatsSettingsError, splitServers } from '../../src/bus/connect-options.ts';

const dir = mkdtempSync(join(tmpdir(), 'rlgate-connect-options-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, content: string) => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};

/** The NatsSettingsError a thunk throws. */
function settingsError(fn: () => unknown): NatsSettingsError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(NatsSettingsError);
    return err as NatsSettingsError;
  }
  throw new Error('expected a NatsSettingsError, nothing was thrown');
}

/** What the authenticator would send to a server (nonce signed where the kind signs). */
function sent(opts: ReturnType<typeof natsConnectOptions>): Record<string, unknown> {
  expect(opts.authenticator).toHaveLength(1);
  return opts.authenticator![0]!('nonce-1') as unknown as Record<string, unknown>;
}

describe('servers', () => {
  it('a comma-separated list is a cluster; blanks are dropped', () => {
    expect(splitServers('nats://a:4222, nats://b:4222,,nats://c:4222 ')).toEqual(['nats://a:4222', 'nats://b:4222', 'nats://c:4222']);
    expect(natsConnectOptions('nats://a:4222,b:4223').servers).toEqual(['nats://a:4222', 'nats://b:4223']);
  });

  it('no credentials and no TLS: nothing but the servers', () => {
    expect(natsConnectOptions('nats://127.0.0.1:4222')).toEqual({ servers: ['nats://127.0.0.1:4222'] });
  });

  it('an empty list or a foreign scheme is refused without echoing user info', () => {
    expect(settingsError(() => natsConnectOptions(' , ')).message).toContain('names no server');
    const err = settingsError(() => natsConnectOptions('http://u:hidden-pw@h:80'));
    expect(err.message).toContain('http://***@h:80');
    expect(err.message).not.toContain('hidden-pw');
  });
});

describe('credentials', () => {
  it('user:password in the URL (percent-decoded) → user/pass, servers stripped of it', () => {
    const opts = natsConnectOptions('nats://gw:p%40ss%2Cw@n1:4222,nats://gw:p%40ss%2Cw@n2:4222,nats://n3:4222');
    expect(opts.servers).toEqual(['nats://n1:4222', 'nats://n2:4222', 'nats://n3:4222']);
    expect(sent(opts)).toMatchObject({ user: 'gw', pass: 'p@ss,w' });
  });

  it('a user name alone in the URL is a token (NATS convention)', () => {
    expect(sent(natsConnectOptions('nats://s3cr3t-token@n1:4222'))).toEqual({ auth_token: 's3cr3t-token' });
  });

  it('different user info on servers of one list is refused', () => {
    const err = settingsError(() => natsConnectOptions('nats://a:one-pw@n1:4222,nats://b:two-pw@n2:4222'));
    expect(err.message).toContain('different credentials');
    expect(err.message).not.toMatch(/one-pw|two-pw/);
  });

  it('--nats-user with a password file (its final newline is not part of the password)', () => {
    const opts = natsConnectOptions('nats://n1:4222', { user: 'gateway', passwordFile: file('pw', 'file-pw\n') });
    expect(sent(opts)).toMatchObject({ user: 'gateway', pass: 'file-pw' });
  });

  it('the password file is read again at each login, so a rotated password is used on reconnect', () => {
    const path = file('rotating', 'first-pw\n');
    const opts = natsConnectOptions('nats://n1:4222', { user: 'gateway', passwordFile: path });
    expect(sent(opts)).toMatchObject({ pass: 'first-pw' });
    writeFileSync(path, 'second-pw\n');
    expect(sent(opts)).toMatchObject({ pass: 'second-pw' });
  });

  it('a token file', () => {
    expect(sent(natsConnectOptions('nats://n1:4222', { tokenFile: file('tok', ' tok-1 \n') }))).toEqual({ auth_token: 'tok-1' });
  });

  it('an nkey seed file signs the nonce with the user key', () => {
    const user = nkeys.createUser();
    const auth = sent(natsConnectOptions('nats://n1:4222', { nkeySeedFile: file('u.nk', `${new TextDecoder().decode(user.getSeed())}\n`) }));
    expect(auth.nkey).toBe(user.getPublicKey());
    expect(typeof auth.sig).toBe('string');
  });

  it('one kind of credential at a time', () => {
    const tok = file('tok2', 'x');
    expect(settingsError(() => natsConnectOptions('nats://u:p@n1:4222', { tokenFile: tok })).message).toContain('one kind of NATS credential');
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { user: 'u', nkeySeedFile: tok })).message).toContain('--nats-nkey-seed');
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { passwordFile: tok })).message).toBe('--nats-password-file needs --nats-user');
  });

  it('unreadable, empty or malformed files are refused by name, without their content', () => {
    const missing = join(dir, 'missing.pw');
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { user: 'u', passwordFile: missing })).message).toContain(`${missing} (ENOENT)`);
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { tokenFile: file('empty', '\n') })).message).toContain('is empty');
    const bad = settingsError(() => natsConnectOptions('nats://n1:4222', { nkeySeedFile: file('bad.nk', 'SUNOTASEED-secret-text') }));
    expect(bad.message).toContain('bad.nk');
    expect(bad.message).not.toContain('secret-text');
    const creds = settingsError(() => natsConnectOptions('nats://n1:4222', { credsFile: file('bad.creds', 'secret-text') }));
    expect(creds.message).toContain('bad.creds');
    expect(creds.message).not.toContain('secret-text');
  });
});

describe('the inbox prefix', () => {
  it('reaches nats.js as inboxPrefix, with any kind of credential or none', () => {
    expect(natsConnectOptions('nats://n1:4222', { inboxPrefix: '_INBOX_gateway' })).toEqual({ servers: ['nats://n1:4222'], inboxPrefix: '_INBOX_gateway' });
    expect(natsConnectOptions('nats://gw:pw@n1:4222', { inboxPrefix: '_INBOX_team.a' }).inboxPrefix).toBe('_INBOX_team.a');
    expect(natsConnectOptions('nats://n1:4222').inboxPrefix).toBeUndefined();
  });

  it('one that cannot start a subject (a wildcard, white space, an empty token) is refused', () => {
    // A prefix outside `_INBOX…` would get no answer from a gateway (it answers inboxes only).
    for (const bad of ['', '_INBOX.>', '_INBOX.*', 'a*b', 'has space', 'a..b', '.a', 'a.', 'team.a._INBOX', '$KV.x', 'rl.refit']) {
      expect(settingsError(() => natsConnectOptions('nats://n1:4222', { inboxPrefix: bad })).message, bad).toContain('invalid --nats-inbox-prefix');
    }
  });
});

describe('TLS', () => {
  it('CA, certificate and key files become tls options; tls:// alone asks for TLS', () => {
    const ca = file('ca.pem', 'x');
    const cert = file('c.pem', 'x');
    const key = file('c.key', 'x');
    expect(natsConnectOptions('nats://n1:4222', { tlsCa: ca, tlsCert: cert, tlsKey: key }).tls).toEqual({ caFile: ca, certFile: cert, keyFile: key });
    expect(natsConnectOptions('tls://n1:4222').tls).toEqual({});
    expect(natsConnectOptions('nats://n1:4222').tls).toBeUndefined();
  });

  it('a certificate without its key, or a missing file, is refused', () => {
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { tlsCert: file('c2.pem', 'x') })).message).toContain('go together');
    expect(settingsError(() => natsConnectOptions('nats://n1:4222', { tlsCa: join(dir, 'nope.pem') })).message).toContain('TLS CA file');
  });
});
