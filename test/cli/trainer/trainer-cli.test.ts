// The trainer's command line over NATS and HTTP: which transport the flags choose, --bytes into
// parameters, the flags that refuse each other, and the summary lines of a report.

import { describe, expect, it } from 'vitest';
import { paramsForBytes } from '../../../src/cli/trainer/chunks.ts';
import { parseByteSize, parseTrainerArgs, parseTrainerInvocation, TRAINER_EXIT, TRAINER_USAGE } from '../../../src/cli/trainer/main.ts';
import { reportLines } from '../../../src/cli/trainer/summary.ts';

describe('parseTrainerInvocation', () => {
  it('--nats-url picks NATS, with the credential flags, the subject root and the new flags', () => {
    expect(
      parseTrainerInvocation(
        [
          '--nats-url',
          'nats://n1:4222,nats://n2:4222',
          '--nats-user',
          'trainer',
          '--nats-password-file',
          '/run/pw',
          '--subject-root',
          'fleet-a',
          '--version',
          '42',
          '--bytes',
          '64MiB',
          '--refit-id',
          'step-42',
          '--timeout-secs',
          '120',
          '--json',
          '--sent-file',
          'sent.json',
          '--selector',
          'role=rollout',
        ],
        {},
      ),
    ).toEqual({
      via: 'nats',
      args: {
        nats: { url: 'nats://n1:4222,nats://n2:4222', auth: { user: 'trainer', passwordFile: '/run/pw' } },
        subjectRoot: 'fleet-a',
        version: '42',
        bytes: 64 * 2 ** 20,
        // 256x256 bfloat16 = 128 KiB a parameter
        params: 512,
        perChunk: 64,
        dtype: 'bfloat16',
        shape: [256, 256],
        refitId: 'step-42',
        timeoutSecs: 120,
        json: true,
        sentFile: 'sent.json',
        selector: 'role=rollout',
      },
    });
  });

  it('without --gateway or --nats-url, takes RLGATE_NATS_URL, then NATS_URL, and RLGATE_SUBJECT_ROOT', () => {
    const a = parseTrainerInvocation(['--version', '1'], { RLGATE_NATS_URL: 'nats://a:1', NATS_URL: 'nats://b:2', RLGATE_SUBJECT_ROOT: 'x' });
    expect(a).toMatchObject({ via: 'nats', args: { nats: { url: 'nats://a:1' }, subjectRoot: 'x' } });
    const b = parseTrainerInvocation(['--version', '1'], { NATS_URL: 'nats://b:2' });
    expect(b).toMatchObject({ via: 'nats', args: { nats: { url: 'nats://b:2' }, subjectRoot: 'rl' } });
  });

  it('--gateway picks HTTP even with a NATS URL in the environment; parseTrainerArgs reads that form', () => {
    const inv = parseTrainerInvocation(['--gateway', 'http://g:30000', '--version', '1', '--refit-id', 'r1'], { NATS_URL: 'nats://b:2' });
    expect(inv).toEqual({
      via: 'http',
      args: { gateway: 'http://g:30000', version: '1', params: 146, perChunk: 64, dtype: 'bfloat16', shape: [256, 256], refitId: 'r1' },
    });
    expect(() => parseTrainerArgs(['--nats-url', 'nats://a:1', '--version', '1'], {})).toThrow(/--gateway is required/);
  });

  it.each([
    [['--version', '1'], /--nats-url \(or --gateway\) is required/],
    [['--nats-url', 'nats://a:1', '--gateway', 'http://g', '--version', '1'], /not both/],
    [['--gateway', 'http://g', '--version', '1', '--nats-user', 'u'], /--nats-user goes with --nats-url/],
    [['--gateway', 'http://g', '--version', '1', '--subject-root', 'x'], /--subject-root goes with --nats-url/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--admin-key', 'k'], /--admin-key guards HTTP only/],
    [['--nats-url', 'nats://a:1'], /--version is required/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--bytes', '1MiB', '--params', '3'], /--bytes or --params/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--bytes', 'lots'], /--bytes must be a size/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--bytes', '1MiB', '--dtype', 'complex128'], /dtype of known width/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--bytes', '1MiB', '--shape', '0,4'], /at least one element/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--refit-id', 'step.42'], /--refit-id must match/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--timeout-secs', '0'], /--timeout-secs must be an integer ≥ 1/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--subject-root', 'a b'], /subject root/],
    [['--nats-url', 'nats://a:1', '--version', '1', '--nats-password-file', '/pw'], /needs --nats-user/],
    [['--nats-url', 'http://a:1', '--version', '1'], /invalid NATS server/],
  ])('refuses %j', (argv, message) => {
    expect(() => parseTrainerInvocation(argv as string[], {})).toThrow(message);
  });
});

describe('--bytes', () => {
  it.each([
    ['1', 1],
    ['1000000', 1_000_000],
    ['96KiB', 96 * 1024],
    ['64MiB', 64 * 2 ** 20],
    ['64mib', 64 * 2 ** 20],
    ['2GiB', 2 * 2 ** 30],
    ['1.5MB', 1_500_000],
    ['10 KB', 10_000],
    ['512B', 512],
  ])('%s is %i bytes', (text, bytes) => {
    expect(parseByteSize(text)).toBe(bytes);
  });

  it.each(['0', '0KiB', '-1', 'MiB', '12XB', ''])('refuses %j', (text) => {
    expect(() => parseByteSize(text)).toThrow(/--bytes/);
  });

  it('rounds up to whole parameters', () => {
    expect(paramsForBytes(8192, 8192)).toBe(1);
    expect(paramsForBytes(8193, 8192)).toBe(2);
    expect(paramsForBytes(1, 8192)).toBe(1);
    expect(() => paramsForBytes(0, 8192)).toThrow(RangeError);
    expect(() => paramsForBytes(10, 0)).toThrow(RangeError);
  });
});

describe('exit codes', () => {
  it('0 on 200, 3 on 207 (as rlgate refit), 1 refused, 2 usage, 4 no report; all in --help', () => {
    expect(TRAINER_EXIT).toEqual({ ok: 0, refused: 1, usage: 2, partial: 3, noReport: 4 });
    for (const code of Object.values(TRAINER_EXIT)) expect(TRAINER_USAGE).toMatch(new RegExp(`[:;] ${code} `));
  });
});

describe('reportLines', () => {
  const phases = { pause: 3, refit: 120, verify: 2, resume: 4 };
  it('a headline, then a line per engine: ok, failed (phase, step, error, status, message), skipped', () => {
    const lines = reportLines({
      id: 'step-42',
      status: 'partial',
      weight_version: '42',
      total: 2,
      succeeded: 1,
      duration_ms: 812,
      world_size: 3,
      engines: [
        { worker_id: 'w1', url: 'http://10.0.0.1:30000', outcome: 'ok', phases, rank_offset: 1, weight_version: '42' },
        {
          worker_id: 'w2',
          url: 'http://10.0.0.22:30000',
          outcome: 'failed',
          failed_phase: 'refit',
          failed_step: 'update_weights_from_distributed 1/3',
          error: 'upstream_error',
          status: 500,
          message: 'injected fault',
          phases: { pause: 3, refit: null, verify: null, resume: 5 },
          rank_offset: 2,
          weight_version: '41',
        },
      ],
      failed: [],
      skipped: [{ worker_id: 'w3', url: 'http://10.0.0.3:30000', reason: 'unreachable', message: 'the engine did not answer' }],
    });
    expect(lines).toEqual([
      'refit step-42 to version 42: partial, 1 of 2 engines (world_size 3, 812 ms)',
      '  ok       http://10.0.0.1:30000   version 42  rank_offset 1  pause 3 ms, refit 120 ms, verify 2 ms, resume 4 ms',
      '  failed   http://10.0.0.22:30000  refit (update_weights_from_distributed 1/3): upstream_error HTTP 500 — injected fault',
      '  skipped  http://10.0.0.3:30000   unreachable — the engine did not answer',
    ]);
  });

  it('says when the refit was aborted, and prints anything that is not a report as JSON', () => {
    expect(reportLines({ id: 'r', status: 'failed', weight_version: '2', total: 1, succeeded: 0, aborted: 'quorum_not_met', engines: [] })[0]).toBe(
      'refit r to version 2: failed, 0 of 1 engines (aborted: quorum_not_met)',
    );
    expect(reportLines({ error: 'x' })).toEqual(['{"error":"x"}']);
  });
});
