// The simulated engine's ZMQ sockets, dialled as TokenSpeed does: HELLO
// from a DEALER with the 2-byte rank identity, INIT read, input DEALER and output PUSH connected,
// READY, registration with the ready response; then request frames in and batches out. The engine
// connects, the gateway binds. What the frames mean is face.ts's business, not this file's.

import { Dealer, Push } from 'zeromq';
import { BadFrame, decodeInit, ENGINE_CORE_DEAD, identityOf, pack } from './wire.ts';

export type LinkPhase = 'dialing' | 'init' | 'registered' | 'dead' | 'closed';

export interface LinkOptions {
  handshakeAddress: string;
  rank: number;
  /** The EngineCoreReadyResponse map sent on the input socket. */
  readyResponse: Record<string, unknown>;
}

export class Link {
  phase: LinkPhase = 'dialing';
  /** Addresses the gateway handed over in INIT. */
  addresses: { input: string; output: string } | null = null;
  private handshake: Dealer | null = null;
  private input: Dealer | null = null;
  private output: Push | null = null;
  private readonly identity: Buffer;
  /** Serializes pushes: zeromq.js allows one pending send per socket. */
  private pushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly opts: LinkOptions,
    /** Every request frame after registration: `[request_type, payload, aux...]`. */
    private readonly onRequest: (frames: Buffer[]) => void,
  ) {
    this.identity = identityOf(opts.rank);
  }

  /** The last socket or handshake failure, for the admin state. */
  error: string | null = null;

  private onError(message: string): void {
    this.error = message;
  }

  /** Dials the handshake address and runs the handshake in the background (ZMQ retries the dial). */
  start(): void {
    const hs = new Dealer({ linger: 1000, routingId: this.identity as unknown as string });
    this.handshake = hs;
    hs.connect(this.opts.handshakeAddress);
    void this.run(hs);
  }

  private async run(hs: Dealer): Promise<void> {
    try {
      await hs.send(pack({ status: 'HELLO', local: true, headless: true, parallel_config_hash: null }));
      const [init] = await hs.receive();
      this.addresses = decodeInit(init);
      this.phase = 'init';
      this.input = new Dealer({ linger: 1000, routingId: this.identity as unknown as string });
      this.output = new Push({ linger: 1000, sendHighWaterMark: 0 });
      this.input.connect(this.addresses.input);
      this.output.connect(this.addresses.output);
      await hs.send(pack({ status: 'READY', local: true, headless: true, parallel_config_hash: null }));
      await this.input.send(pack(this.opts.readyResponse));
      this.phase = 'registered';
      // Like EngineCoreProc, the handshake socket is done once the engine is up.
      hs.close();
      this.handshake = null;
      for await (const frames of this.input) this.onRequest(frames);
    } catch (e) {
      if (this.phase !== 'closed') this.onError(e instanceof BadFrame ? e.message : `link failed: ${(e as Error).message}`);
    }
  }

  /** Pushes one output message, in order with the ones before it. */
  push(frames: Buffer[]): void {
    const out = this.output;
    if (!out || this.phase !== 'registered') return;
    this.pushing = this.pushing
      .then(() => out.send(frames))
      .catch((e: Error) => {
        if (this.phase !== 'closed') this.onError(`push failed: ${e.message}`);
      });
  }

  /** The engine dies as EngineCoreProc does: the sentinel on the output socket, then silence. */
  die(): void {
    this.push([ENGINE_CORE_DEAD]);
    this.phase = 'dead';
  }

  async close(): Promise<void> {
    const last = this.pushing;
    this.phase = 'closed';
    await Promise.race([last, new Promise((r) => setTimeout(r, 200).unref())]);
    for (const s of [this.handshake, this.input, this.output]) if (s && !s.closed) s.close();
  }
}
