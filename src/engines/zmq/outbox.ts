// The one writer of a lane's input ROUTER: every ADD and ABORT in order (zeromq.js allows one
// pending send per socket). Sends never block inside libzmq, whose blocked send would never wake
// once a peer is gone; EAGAIN is retried here, and a message unsendable past `stuckMs` is the
// "stuck send", fatal for the whole lane. It never decides what to send.

import type { Router } from 'zeromq';

export interface SendOptions {
  /** A reachability check: EAGAIN rejects at once instead of being retried. */
  probe?: boolean;
  /** Checked before each retry; false drops the message as unreachable. */
  alive?: () => boolean;
}

interface Item extends SendOptions {
  frames: Buffer[];
  resolve: () => void;
  reject: (e: Error) => void;
  blockedSince: number;
}

const RETRY_MS = [1, 2, 5, 10, 20, 50];

export function unreachable(message: string): Error & { code: string } {
  return Object.assign(new Error(message), { code: 'EHOSTUNREACH' });
}

export class Outbox {
  private readonly queue: Item[] = [];
  private busy = false;
  private failed: Error | null = null;

  /** `onStuck` runs once when a message stays unsendable for `stuckMs`. */
  constructor(
    private readonly socket: Router,
    private readonly stuckMs: number,
    private readonly onStuck: (e: Error) => void,
  ) {}

  /** Resolves when libzmq took the message; rejects with its error (e.g. EHOSTUNREACH). */
  send(frames: Buffer[], opts: SendOptions = {}): Promise<void> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ frames, resolve, reject, blockedSince: 0, ...opts });
      if (!this.busy) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.busy = true;
    let retries = 0;
    while (this.queue.length > 0 && !this.failed) {
      const item = this.queue[0];
      try {
        await this.socket.send(item.frames);
        this.queue.shift();
        retries = 0;
        item.resolve();
        continue;
      } catch (e) {
        const err = e as Error & { code?: string };
        if (err.code !== 'EAGAIN' || item.probe) {
          this.queue.shift();
          item.reject(err);
          continue;
        }
      }
      // EAGAIN: the peer's pipe is full or going away. Retry the head, in order.
      if (item.alive && !item.alive()) {
        this.queue.shift();
        item.reject(unreachable('engine is gone'));
        continue;
      }
      const now = Date.now();
      item.blockedSince ||= now;
      if (now - item.blockedSince >= this.stuckMs) {
        this.failed = new Error(`a send to the engine stayed blocked for ${this.stuckMs} ms`);
        for (const rest of this.queue.splice(0)) rest.reject(this.failed);
        this.onStuck(this.failed);
        break;
      }
      await new Promise((r) => setTimeout(r, RETRY_MS[Math.min(retries++, RETRY_MS.length - 1)]));
    }
    this.busy = false;
  }

  /** Accepts sends again after a stuck send (the engine completed a new handshake). */
  reset(): void {
    this.failed = null;
    if (!this.busy && this.queue.length > 0) void this.drain();
  }

  /** Rejects everything still queued (the lane is closing). */
  close(reason: Error): void {
    this.failed ??= reason;
    for (const rest of this.queue.splice(0)) rest.reject(reason);
  }
}
