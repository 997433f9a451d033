// The NATS client settings in the gateway's settings table and in the NATS-only commands: each
// credential/TLS flag has its RLGATE_ variable and config-file key, NATS_URL is read after
// RLGATE_NATS_URL, and combinations that cannot work stop the start with a message that shows no
// secret.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NATS_CLIENT_FLAGS, readNatsClientFlags } from '../../src/bus/client-flags.ts';
import { ConfigError, envName, helpText, loadConfig } from '../../src/gateway/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'rlgate-nats-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const configFile = (content: unknown) => {
  const path = join(dir, `c${n++}.json`);
  writeFileSync(path, JSON.stringify(content));
  return path;
};

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError, nothing was thrown');
}

describe('the NATS URL', () => {
  it('RLGATE_NATS_URL wins over NATS_URL, which is used when it is the only one', () => {
    expect(loadConfig([], { NATS_URL: 'nats://a:4222' }).natsUrl).toBe('nats://a:4222');
    expect(loadConfig([], { NATS_URL: 'nats://a:4222', RLGATE_NATS_URL: 'nats://b:4222' }).natsUrl).toBe('nats://b:4222');
    expect(loadConfig([], { NATS_URL: 'nats://a:4222', RLGATE_NATS_URL: '' }).natsUrl).toBe('nats://a:4222');
    expect(loadConfig(['--nats-url', 'nats://c:4222'], { NATS_URL: 'nats://a:4222', RLGATE_NATS_URL: 'nats://b:4222' }).natsUrl).toBe('nats://c:4222');
  });

  it('a cluster is a comma-separated list', () => {
    expect(loadConfig(['--nats-url', 'nats://n1:4222,nats://n2:4222,nats://n3:4222'], {}).natsUrl).toBe('nats://n1:4222,nats://n2:4222,nats://n3:4222');
  });
});

describe('credential and TLS settings', () => {
  it("each flag has the gateway's environment name, and --help lists both", () => {
    const help = helpText();
    for (const f of NATS_CLIENT_FLAGS) {
      expect(f.env).toBe(envName(f.flag));
      expect(help).toContain(`--${f.flag}`);
      expect(help).toContain(f.env);
    }
    expect(help).toContain('RLGATE_NATS_URL, then NATS_URL');
  });

  it('flags, environment variables and config-file keys (camelCase, snake_case, dotted) all reach config.nats', () => {
    const url = ['--nats-url', 'nats://n1:4222'];
    for (const f of NATS_CLIENT_FLAGS.filter((x) => !x.flag.startsWith('nats-tls'))) {
      // One credential kind at a time (user and password file together).
      const extra = f.key === 'passwordFile' ? { user: 'u' } : {};
      // File paths for the file flags; an inbox prefix must start with _INBOX.
      const val = (path: string) => (f.key === 'inboxPrefix' ? `_INBOX${path.replace(/\//g, '_')}` : path);
      const fromFlag = loadConfig([...url, `--${f.flag}`, val('/x/file'), ...(f.key === 'passwordFile' ? ['--nats-user', 'u'] : [])], {});
      expect(fromFlag.nats[f.key], f.flag).toBe(val('/x/file'));
      const fromEnv = loadConfig(url, { [f.env]: val('/x/env'), ...(f.key === 'passwordFile' ? { RLGATE_NATS_USER: 'u' } : {}) });
      expect(fromEnv.nats[f.key], f.env).toBe(val('/x/env'));
      for (const key of [f.key, f.fileKey]) {
        const nested = loadConfig(['--config', configFile({ nats_url: 'nats://n1:4222', nats: { [key]: val('/x/cfg'), ...extra } })], {});
        expect(nested.nats[f.key], `nats.${key}`).toBe(val('/x/cfg'));
      }
      const dotted = loadConfig(
        [
          '--config',
          configFile({ natsUrl: 'nats://n1:4222', [`nats.${f.fileKey}`]: val('/x/dot'), ...(f.key === 'passwordFile' ? { 'nats.user': 'u' } : {}) }),
        ],
        {},
      );
      expect(dotted.nats[f.key]).toBe(val('/x/dot'));
    }
    const tls = loadConfig([...url, '--nats-tls-ca', 'ca.pem', '--nats-tls-cert=c.pem'], { RLGATE_NATS_TLS_KEY: 'c.key' });
    expect(tls.nats).toMatchObject({ tlsCa: 'ca.pem', tlsCert: 'c.pem', tlsKey: 'c.key' });
  });

  it('flags win over the environment, which wins over the config file', () => {
    const file = configFile({ nats_url: 'nats://n1:4222', nats: { token_file: '/from/file' } });
    expect(loadConfig(['--config', file], {}).nats.tokenFile).toBe('/from/file');
    expect(loadConfig(['--config', file], { RLGATE_NATS_TOKEN_FILE: '/from/env' }).nats.tokenFile).toBe('/from/env');
    expect(loadConfig(['--config', file, '--nats-token-file', '/from/flag'], { RLGATE_NATS_TOKEN_FILE: '/from/env' }).nats.tokenFile).toBe('/from/flag');
  });

  it('credentials without --nats-url are a startup error (the embedded server has no users)', () => {
    expect(configError(() => loadConfig(['--nats-creds', '/x.creds'], {})).message).toBe(
      '--nats-creds needs --nats-url: the embedded nats-server has no users and no TLS',
    );
  });

  it('two kinds of credential, or a password file without a user, are startup errors that show no secret', () => {
    const both = configError(() => loadConfig(['--nats-url', 'nats://gw:hidden-pw@n1:4222', '--nats-token-file', '/t'], {}));
    expect(both.message).toContain('give one kind of NATS credential');
    expect(both.message).not.toContain('hidden-pw');
    expect(configError(() => loadConfig(['--nats-url', 'nats://n1:4222', '--nats-password-file', '/p'], {})).message).toBe(
      '--nats-password-file needs --nats-user',
    );
    expect(configError(() => loadConfig(['--nats-url', 'nats://n1:4222', '--nats-tls-key', '/k'], {})).message).toContain('go together');
  });
});

describe('the NATS-only commands (refit, watch)', () => {
  it('read the same flags and variables, flags first, then the default server', () => {
    expect(readNatsClientFlags([], {})).toEqual({ url: 'nats://127.0.0.1:4222', auth: {} });
    expect(readNatsClientFlags([], { NATS_URL: 'nats://a:4222' }).url).toBe('nats://a:4222');
    expect(readNatsClientFlags(['--nats-url=nats://c:4222'], { RLGATE_NATS_URL: 'nats://b:4222' }).url).toBe('nats://c:4222');
    const r = readNatsClientFlags(['--version', '3', '--nats-user', 'trainer', '--nats-password-file=/pw'], {
      RLGATE_NATS_TLS_CA: '/ca.pem',
      RLGATE_NATS_USER: 'other',
    });
    expect(r.auth).toEqual({ user: 'trainer', passwordFile: '/pw', tlsCa: '/ca.pem' });
  });
});
