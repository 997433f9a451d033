// Creates a JetStream stream, or joins it when it exists: every replica of a subject root opens the
// same streams at start, and two starting at once may both try to create one.

import type { JetStreamManager, StreamConfig } from '@nats-io/jetstream';

export async function openStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string }): Promise<void> {
  try {
    await jsm.streams.info(config.name);
    return;
  } catch {
    // not there yet
  }
  try {
    await jsm.streams.add(config);
  } catch (err) {
    // Another replica created it at the same moment.
    await jsm.streams.info(config.name).catch(() => {
      throw err;
    });
  }
}
