// `rlgate refit`: a trainer's refit over NATS — one request on `rl.refit.request`, answered by
// whichever gateway replica takes it, with the per-engine report. Exit 0 on 200, 3 on 207.

import { natsClientFlagsHelp, readNatsClientFlags } from '../bus/client-flags.ts';
import { natsConnectOptions } from '../bus/connect-options.ts';
import { connectBus } from '../bus/connection.ts';
import { subjects } from '../bus/subjects.ts';

const HELP = `usage: rlgate refit --version V (--model-path P | --request FILE) [--selector S] [--nats-url U]
                     [--subject-root R] [--timeout-secs N] [NATS credential flags]
  Sends {"weight_version", "selector", "source": {"kind": "disk", "model_path"}} (or the JSON
  request in FILE) on <root>.refit.request and prints the report.
${natsClientFlagsHelp()}`;

export async function refitCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  const get = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  let request: Record<string, unknown>;
  const file = get('--request');
  if (file) {
    const { readFile } = await import('node:fs/promises');
    request = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  } else {
    const version = get('--version');
    const modelPath = get('--model-path');
    if (!version || !modelPath) {
      process.stderr.write(`${HELP}\n`);
      return 2;
    }
    request = { weight_version: version, source: { kind: 'disk', model_path: modelPath } };
    const selector = get('--selector');
    if (selector) request.selector = selector;
  }
  const nats = readNatsClientFlags(argv);
  const subj = subjects(get('--subject-root') ?? process.env.RLGATE_SUBJECT_ROOT ?? 'rl');
  const timeoutMs = Number(get('--timeout-secs') ?? 900) * 1000;
  const bus = await connectBus({ ...natsConnectOptions(nats.url, nats.auth), name: 'rlgate-refit' });
  try {
    const answer = await bus.request<{ status: number; report?: unknown; plan?: unknown }>(subj.refitRequest(), request, timeoutMs);
    // A dry run answers the plan instead of a report.
    process.stdout.write(`${JSON.stringify(answer.report ?? answer.plan, null, 2)}\n`);
    return answer.status === 200 ? 0 : 3;
  } finally {
    await bus.close();
  }
}
