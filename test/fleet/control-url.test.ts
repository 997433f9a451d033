import { describe, expect, it } from 'vitest';
import { controlUrlFor, resolveControlUrl, workerHost } from '../../src/fleet/control-url.ts';

describe('resolveControlUrl', () => {
  it.each<[string | undefined | null, string, string | null]>([
    // SMG's resolution examples.
    ['http://10.0.0.5:40100', 'grpc://10.0.0.5:30000', 'http://10.0.0.5:40100'],
    ['http://ctl.internal:8001/', 'grpc://a:1', 'http://ctl.internal:8001'],
    ['http://0.0.0.0:40100', 'grpc://10.0.0.5:30000', 'http://10.0.0.5:40100'],
    ['http://[::]:40100', 'grpc://[fd00::5]:30000', 'http://[fd00::5]:40100'],
    ['http://:40100', 'grpc://10.0.0.5:30000@2', 'http://10.0.0.5:40100'],
    ['10.0.0.5:40100', 'grpc://x:1', '10.0.0.5:40100'],
    ['   ', 'grpc://x:1', null],
    // Absent label.
    [undefined, 'grpc://x:1', null],
    [null, 'grpc://x:1', null],
    // A wildcard bind advertised by a gRPC worker takes the worker's host.
    ['http://0.0.0.0:40100', 'grpc://10.0.0.5:30000', 'http://10.0.0.5:40100'],
    // Trimming: whitespace, then every trailing slash.
    ['  http://ctl:1//  ', 'grpc://a:1', 'http://ctl:1'],
    ['//', 'grpc://a:1', null],
    // Unbracketed `::` is a wildcard only without a port (`:::40100` has no parsable host).
    ['http://::', 'grpc://h:1', 'http://h'],
    ['https://:::40100/ctl', 'grpc://h:1', 'https://:::40100/ctl'],
    // The advertised scheme, port and path are kept.
    ['http://0.0.0.0:40100/rl/', 'grpc://h:1', 'http://h:40100/rl'],
    ['http://0.0.0.0', 'grpc://h:1', 'http://h'],
    ['https://[::]/x', 'grpcs://h:1', 'https://h/x'],
    // Userinfo on the worker URL is stripped, with or without a DP suffix.
    ['http://0.0.0.0:40100', 'grpc://user:secret@10.0.0.7:30000', 'http://10.0.0.7:40100'],
    ['http://0.0.0.0:40100', 'grpc://user:secret@10.0.0.7:30000@3', 'http://10.0.0.7:40100'],
    ['http://0.0.0.0:40100', 'grpc://u@[fd00::9]:1', 'http://[fd00::9]:40100'],
    // A worker URL with a path or no port.
    ['http://0.0.0.0:40100', 'http://h/base', 'http://h:40100'],
    ['http://0.0.0.0:40100', 'grpc://h', 'http://h:40100'],
    // Concrete hosts come back as they are, even `localhost`.
    ['http://localhost:40100', 'grpc://10.0.0.5:1', 'http://localhost:40100'],
  ])('%j against %j → %j', (advertised, worker, expected) => {
    expect(resolveControlUrl(advertised, worker)).toBe(expected);
  });

  it('keeps the advertised value when the worker host is empty', () => {
    expect(resolveControlUrl('http://0.0.0.0:1', 'grpc://:5')).toBe('http://0.0.0.0:1');
  });
});

describe('workerHost', () => {
  it.each([
    ['grpc://10.0.0.5:30000', '10.0.0.5'],
    ['grpc://10.0.0.5:30000@2', '10.0.0.5'],
    ['grpc://[fd00::5]:30000', '[fd00::5]'],
    ['grpc://u:p@h:1', 'h'],
    ['http://h:1/x?y=z', 'h'],
    ['h:1', 'h'],
  ])('%j → %j', (url, host) => {
    expect(workerHost(url)).toBe(host);
  });
});

describe('controlUrlFor', () => {
  it.each<['http' | 'grpc' | 'zmq', string, Record<string, string>, string | null]>([
    ['http', 'http://a:1', {}, 'http://a:1'],
    // An HTTP worker ignores the label.
    ['http', 'http://a:1', { 'rl.control_url': 'http://elsewhere:1' }, 'http://a:1'],
    ['grpc', 'grpc://10.0.0.5:30000', { 'rl.control_url': 'http://0.0.0.0:40100' }, 'http://10.0.0.5:40100'],
    ['grpc', 'grpc://10.0.0.5:30000', { 'rl.control_url': '  ' }, null],
    ['grpc', 'grpc://10.0.0.5:30000', {}, null],
    ['zmq', 'ipc:///tmp/engine', { 'rl.control_url': 'http://127.0.0.1:40100' }, 'http://127.0.0.1:40100'],
    ['zmq', 'ipc:///tmp/engine', {}, null],
  ])('%s %j %j → %j', (mode, baseUrl, labels, expected) => {
    expect(controlUrlFor(mode, baseUrl, labels)).toBe(expected);
  });
});
