// `rlgate gateway`: one gateway replica in the foreground until SIGINT/SIGTERM, then a clean
// shutdown (the embedded nats-server, if any, goes with it).

import { ConfigError, helpText, loadConfig } from '../gateway/config.ts';
import { startGateway } from '../gateway/gateway.ts';

export async function gatewayCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  let config;
  try {
    config = loadConfig(argv);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`rlgate gateway: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const gw = await startGateway(config);
  process.stdout.write(`${JSON.stringify({ event: 'listening', url: gw.url, nats_url: gw.natsUrl, replica_id: gw.replicaId })}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await gw.close();
  return 0;
}
