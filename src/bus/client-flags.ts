// The names a user gives the NATS client settings: one row per credential, TLS or inbox-prefix
// flag, with its environment variable and config-file key, shared by the gateway's settings table
// and the commands that only talk NATS (`rlgate refit`, `rlgate watch`, `rlgate trainer`), so the
// names cannot drift.

import type { NatsAuthSettings } from './connect-options.ts';

export interface NatsClientFlag {
  /** Flag name without `--`. */
  flag: string;
  /** Environment variable (the gateway's rule: RLGATE_ + the flag in upper case, `-` → `_`). */
  env: string;
  /** Field of NatsAuthSettings, also the camelCase config-file key under `nats`. */
  key: keyof NatsAuthSettings;
  /** snake_case config-file key under `nats`. */
  fileKey: string;
  help: string;
}

export const NATS_CLIENT_FLAGS: NatsClientFlag[] = [
  { flag: 'nats-user', env: 'RLGATE_NATS_USER', key: 'user', fileKey: 'user', help: 'NATS user name; its password comes from --nats-password-file' },
  {
    flag: 'nats-password-file',
    env: 'RLGATE_NATS_PASSWORD_FILE',
    key: 'passwordFile',
    fileKey: 'password_file',
    help: "file holding the NATS user's password",
  },
  { flag: 'nats-token-file', env: 'RLGATE_NATS_TOKEN_FILE', key: 'tokenFile', fileKey: 'token_file', help: 'file holding a NATS authorization token' },
  { flag: 'nats-nkey-seed', env: 'RLGATE_NATS_NKEY_SEED', key: 'nkeySeedFile', fileKey: 'nkey_seed', help: 'file holding a NATS user nkey seed (SU...)' },
  { flag: 'nats-creds', env: 'RLGATE_NATS_CREDS', key: 'credsFile', fileKey: 'creds', help: 'NATS .creds file (user JWT and nkey seed)' },
  { flag: 'nats-tls-ca', env: 'RLGATE_NATS_TLS_CA', key: 'tlsCa', fileKey: 'tls_ca', help: "PEM file of the CA that signed the NATS servers' certificates" },
  {
    flag: 'nats-tls-cert',
    env: 'RLGATE_NATS_TLS_CERT',
    key: 'tlsCert',
    fileKey: 'tls_cert',
    help: 'PEM client certificate for NATS servers that verify clients (with --nats-tls-key)',
  },
  { flag: 'nats-tls-key', env: 'RLGATE_NATS_TLS_KEY', key: 'tlsKey', fileKey: 'tls_key', help: 'PEM private key of --nats-tls-cert' },
  {
    flag: 'nats-inbox-prefix',
    env: 'RLGATE_NATS_INBOX_PREFIX',
    key: 'inboxPrefix',
    fileKey: 'inbox_prefix',
    help: "prefix of this client's reply subjects instead of _INBOX: the one its NATS user may subscribe to (deploy/nats/accounts.conf: _INBOX_<user>)",
  },
];

export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

/** The NATS URL of the environment: rlgate's own variable first, then the NATS tools' NATS_URL. */
export function natsUrlFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  return env.RLGATE_NATS_URL || env.NATS_URL || undefined;
}

/** `--name V` or `--name=V`; the last one given wins. */
function flagValue(argv: string[], name: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === `--${name}`) value = argv[i + 1];
    else if (a.startsWith(`--${name}=`)) value = a.slice(name.length + 3);
  }
  return value;
}

/**
 * For the commands that only talk NATS: the server list and the credentials from the flags, else
 * the environment (the same names as the gateway's), else nats://127.0.0.1:4222 without any.
 */
export function readNatsClientFlags(argv: string[], env: NodeJS.ProcessEnv = process.env): { url: string; auth: Partial<NatsAuthSettings> } {
  const url = flagValue(argv, 'nats-url') ?? natsUrlFromEnv(env) ?? DEFAULT_NATS_URL;
  const auth: Partial<NatsAuthSettings> = {};
  for (const f of NATS_CLIENT_FLAGS) {
    const v = flagValue(argv, f.flag) ?? (env[f.env] || undefined);
    if (v !== undefined) auth[f.key] = v;
  }
  return { url, auth };
}

/** These flags as `node:util` parseArgs options, for a command that refuses unknown flags. */
export function natsClientParseOptions(): Record<string, { type: 'string' }> {
  return Object.fromEntries([['nats-url', { type: 'string' as const }], ...NATS_CLIENT_FLAGS.map((f) => [f.flag, { type: 'string' as const }])]);
}

/** The usage lines of these flags, for a command's --help. */
export function natsClientFlagsHelp(): string {
  const rows = [['--nats-url U[,U...]', 'NATS server or cluster [RLGATE_NATS_URL, then NATS_URL]']];
  for (const f of NATS_CLIENT_FLAGS) rows.push([`--${f.flag} V`, `${f.help} [${f.env}]`]);
  return rows.map(([l, r]) => `  ${l!.padEnd(26)}${r}`).join('\n');
}
