// docker-compose.yml as Debian's docker-compose 1.29 reads it (no engine needed): it validates,
// and its normalised form has a 3-node NATS cluster on the shipped config, two gateway replicas
// on one subject root listing all three nodes, one simulator per engine wire and the trainer over
// NATS. Every rlgate command in it is parsed by the real flag parsers, so a flag typo fails here,
// every NATS client names the inbox prefix deploy/nats/accounts.conf lets its user read, the
// trainer's entrypoint is run (it writes the password file its command names), and the NATS node
// config is checked by nats-server itself (`-t`).

import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readNatsClientFlags } from '../../src/bus/client-flags.ts';
import { splitServers, type NatsAuthSettings } from '../../src/bus/connect-options.ts';
import { findNatsServer } from '../../src/bus/server.ts';
import { loadConfig } from '../../src/gateway/config.ts';
import { parseArgs as parseSglangArgs } from '../../sim/sglang/options.ts';
import { parseArgs as parseTokenspeedArgs } from '../../sim/tokenspeed/cli.ts';
import { parseArgs as parseZmqArgs } from '../../sim/zmq/options.ts';
import { parseTrainerInvocation } from '../../src/cli/trainer/main.ts';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const COMPOSE = join(REPO_ROOT, 'docker-compose.yml');

interface Service {
  image?: string;
  build?: { context: string };
  command?: string[];
  entrypoint?: string[];
  hostname?: string;
  volumes?: string[];
  environment?: Record<string, string>;
  network_mode?: string;
}

/** The environment without the variables the compose file reads, so its defaults apply. */
function composeEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('RLGATE_') && !k.startsWith('COMPOSE_')) env[k] = v;
  return env;
}

function compose(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('docker-compose', ['-f', COMPOSE, ...args], { cwd: REPO_ROOT, env: composeEnv(), encoding: 'utf8', timeout: 60_000 });
  if (r.error) throw new Error(`docker-compose could not run (Debian: apt-get install --no-install-recommends docker-compose): ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The normalised file as JSON: docker-compose prints YAML, and it depends on PyYAML itself. */
function normalised(): { services: Record<string, Service>; volumes?: Record<string, unknown> } {
  const yaml = compose(['config']);
  expect(yaml.status, yaml.stderr).toBe(0);
  const json = execFileSync('/usr/bin/python3', ['-c', 'import json,sys,yaml; print(json.dumps(yaml.safe_load(sys.stdin)))'], {
    input: yaml.stdout,
    encoding: 'utf8',
  });
  return JSON.parse(json);
}

const flag = (command: string[], name: string) => {
  const hit = command.find((a) => a.startsWith(`--${name}=`));
  if (hit) return hit.slice(name.length + 3);
  const i = command.indexOf(`--${name}`);
  return i >= 0 ? command[i + 1] : undefined;
};

/** A command's NATS server list and settings, read by its own parser (the gateway's settings, or the NATS-only commands' flags). */
function natsClientOf(command: string[]): { url: string; auth: Partial<NatsAuthSettings> } {
  if (command[0] !== 'gateway') return readNatsClientFlags(command.slice(1), {});
  const cfg = loadConfig(command.slice(1), {});
  return { url: cfg.natsUrl!, auth: cfg.nats };
}

describe('docker-compose.yml', () => {
  it('passes `docker-compose config -q`', () => {
    const r = compose(['config', '-q']);
    expect(r.status, r.stderr).toBe(0);
  });

  const { services, volumes } = normalised();
  const byCommand = (...head: string[]) => Object.entries(services).filter(([, s]) => head.every((h, i) => s.command?.[i] === h));

  it('runs a 3-node NATS 2.9 cluster on deploy/nats/nats.conf, each node with its own name and store', () => {
    const nodes = Object.entries(services).filter(([, s]) => s.image?.startsWith('nats:'));
    expect(nodes.map(([name]) => name).sort()).toEqual(['nats-1', 'nats-2', 'nats-3']);
    for (const [name, s] of nodes) {
      expect(s.image).toBe('nats:2.9');
      expect(flag(s.command!, 'config')).toBe('/etc/nats/nats.conf');
      expect(flag(s.command!, 'server_name')).toBe(name);
      expect(s.volumes).toContain(`${join(REPO_ROOT, 'deploy/nats')}:/etc/nats:ro`);
      expect(s.volumes).toContain(`${name}-data:/data:rw`);
      expect(Object.keys(s.environment ?? {}).sort()).toEqual([
        'RLGATE_NATS_GATEWAY_PASSWORD',
        'RLGATE_NATS_OPERATOR_PASSWORD',
        'RLGATE_NATS_TRAINER_PASSWORD',
      ]);
    }
    expect(Object.keys(volumes ?? {}).sort()).toEqual(['nats-1-data', 'nats-2-data', 'nats-3-data']);
  });

  it('runs two gateway replicas with RL on, distinct replica ids, one subject root and all three NATS nodes', () => {
    const gateways = byCommand('gateway');
    expect(gateways.map(([name]) => name).sort()).toEqual(['gateway-1', 'gateway-2']);
    const replicaIds = new Set<string>();
    const roots = new Set<string>();
    for (const [name, s] of gateways) {
      expect(s.build?.context, name).toBe(REPO_ROOT);
      // The gateway's own settings loader accepts the command as written.
      const cfg = loadConfig(s.command!.slice(1), {});
      expect(cfg.rl.enabled).toBe(true);
      expect(cfg.host).toBe('0.0.0.0');
      replicaIds.add(cfg.replicaId!);
      roots.add(cfg.subjectRoot);
      const hosts = splitServers(cfg.natsUrl!).map((u) => new URL(u).hostname);
      expect(hosts, name).toEqual(['nats-1', 'nats-2', 'nats-3']);
    }
    expect(replicaIds.size).toBe(2);
    expect([...roots]).toEqual(['rl']);
  });

  it('runs an SGLang, a TokenSpeed and a ZMQ simulator, with flags their parsers accept', () => {
    const [sglang] = byCommand('sim', 'sglang');
    const [tokenspeed] = byCommand('sim', 'tokenspeed');
    const [zmq] = byCommand('sim', 'zmq');
    expect(sglang && tokenspeed && zmq, JSON.stringify(Object.keys(services))).toBeTruthy();
    expect(() => parseSglangArgs(sglang![1].command!.slice(2))).not.toThrow();
    expect(() => parseTokenspeedArgs(tokenspeed![1].command!.slice(2))).not.toThrow();
    expect(() => parseZmqArgs(zmq![1].command!.slice(2))).not.toThrow();
    // The ZMQ lane binds loopback: the engine lives in its gateway's network namespace.
    expect(zmq![1].network_mode).toBe('service:gateway-1');
  });

  it("runs the trainer simulator over NATS as the trainer user, on every node and the gateways' root, reachable by the engines", () => {
    const [trainer] = byCommand('trainer');
    expect(trainer).toBeDefined();
    const [name, s] = trainer!;
    const inv = parseTrainerInvocation(s.command!.slice(1), {});
    expect(inv.via).toBe('nats');
    if (inv.via !== 'nats') return;
    expect(splitServers(inv.args.nats.url).map((u) => new URL(u).hostname)).toEqual(['nats-1', 'nats-2', 'nats-3']);
    // The credential is the user and its password file, not user info in the URL.
    expect(splitServers(inv.args.nats.url).every((u) => new URL(u).username === '')).toBe(true);
    expect(inv.args.nats.auth.user).toBe('trainer');
    expect(inv.args.nats.auth.passwordFile).toMatch(/^\//);
    expect(inv.args.subjectRoot).toBe('rl');
    expect(inv.args.masterAddress).toBe(name);
    expect(s.hostname).toBe(name);
    // The password the NATS nodes give the trainer user is the one the trainer gets.
    expect(s.environment?.RLGATE_NATS_TRAINER_PASSWORD).toBe(services['nats-1']!.environment!.RLGATE_NATS_TRAINER_PASSWORD);
  });

  it("the trainer's entrypoint writes its password to the file its command names, readable by it alone, and runs rlgate", () => {
    const [, s] = byCommand('trainer')[0]!;
    const [shell, dashC, script, argv0] = s.entrypoint!;
    expect([shell, dashC]).toEqual(['sh', '-c']);
    const fileFlag = s.command!.find((a) => a.startsWith('--nats-password-file='))!;
    const file = fileFlag.slice('--nats-password-file='.length);
    // `docker-compose config` keeps `$$` (compose's escape for a literal `$`) as written.
    const unescaped = script!.replaceAll('$$', '$');
    expect(unescaped).toContain(file);
    // Run it here with the file moved into a directory of this test, and `--help` (connects nowhere).
    const dir = mkdtempSync(join(tmpdir(), 'rlgate-compose-'));
    try {
      const local = join(dir, 'nats-trainer-password');
      const run = spawnSync(shell!, [dashC!, unescaped.replaceAll(file, local), argv0!, 'trainer', '--help'], {
        cwd: REPO_ROOT,
        env: { ...composeEnv(), RLGATE_NATS_TRAINER_PASSWORD: 's3cret pw' },
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toContain('usage: rlgate trainer');
      expect(readFileSync(local, 'utf8')).toBe('s3cret pw');
      expect(statSync(local).mode & 0o077).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every NATS client reads its replies under the prefix its user may subscribe to (_INBOX_<user>)', () => {
    const accounts = readFileSync(join(REPO_ROOT, 'deploy/nats/accounts.conf'), 'utf8');
    const clients = [...byCommand('gateway'), ...byCommand('trainer'), ...byCommand('watch')];
    expect(clients.map(([name]) => name).sort()).toEqual(['gateway-1', 'gateway-2', 'trainer', 'watch']);
    for (const [name, s] of clients) {
      const nats = natsClientOf(s.command!);
      const user = nats.auth.user ?? decodeURIComponent(new URL(splitServers(nats.url)[0]!).username);
      expect(['gateway', 'trainer', 'operator'], name).toContain(user);
      expect(nats.auth.inboxPrefix, name).toBe(`_INBOX_${user}`);
      expect(accounts, name).toContain(`"_INBOX_${user}.>"`);
    }
  });

  it('builds from a Dockerfile that runs `node bin/rlgate.mjs`', () => {
    expect(existsSync(join(REPO_ROOT, 'Dockerfile'))).toBe(true);
    expect(existsSync(join(REPO_ROOT, 'bin/rlgate.mjs'))).toBe(true);
  });
});

describe('deploy/nats/nats.conf', () => {
  it('is a valid nats-server configuration once the passwords are set, and refuses to start without them', () => {
    const conf = join(REPO_ROOT, 'deploy/nats/nats.conf');
    const bin = findNatsServer();
    const passwords = { RLGATE_NATS_GATEWAY_PASSWORD: 'a', RLGATE_NATS_TRAINER_PASSWORD: 'b', RLGATE_NATS_OPERATOR_PASSWORD: 'c' };
    const ok = spawnSync(bin, ['-t', '-c', conf], { env: { ...composeEnv(), ...passwords }, encoding: 'utf8', timeout: 30_000 });
    expect(ok.status, `${ok.stdout}${ok.stderr}`).toBe(0);
    const missing = spawnSync(bin, ['-t', '-c', conf], { env: composeEnv(), encoding: 'utf8', timeout: 30_000 });
    expect(missing.status).not.toBe(0);
    expect(`${missing.stdout}${missing.stderr}`).toContain('RLGATE_NATS_GATEWAY_PASSWORD');
  });
});
