// One engine's membership in the broadcast group: a TCP connection per simulated GPU rank, the
// rendezvous handshake, and receiving each broadcast whole on every rank while hashing it. It
// never buffers a whole tensor and never reconnects: a failed transfer leaves the membership broken.

import { createHash, type Hash } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { tensorBytes } from './dtype.ts';
import { HEAD_BYTES, type GroupMember, type JoinGroup, type JoinParams, type LoadedTensor, type TensorSpec } from './types.ts';
import { encodeFrame, FrameReader, FrameType, GroupError, PROTOCOL_VERSION, type GroupErrorCode, type WireEvent } from './wire.ts';

/** Pause between connection attempts while the master is not listening yet (it may open late). */
const RETRY_MS = 50;

export const joinGroup: JoinGroup = async (params) => {
  const bad = invalidParam(params);
  if (bad) throw new GroupError('invalid_params', bad);
  const membership = new Membership(params);
  await membership.join();
  return membership;
};

function invalidParam(p: JoinParams): string | null {
  const int = (v: number, min: number): boolean => Number.isSafeInteger(v) && v >= min;
  if (!int(p.gpus, 1)) return `gpus must be an integer ≥ 1, got ${p.gpus}`;
  if (!int(p.rankOffset, 0)) return `rankOffset must be an integer ≥ 0, got ${p.rankOffset}`;
  if (!int(p.worldSize, 1)) return `worldSize must be an integer ≥ 1, got ${p.worldSize}`;
  if (!int(p.masterPort, 1) || p.masterPort > 65535) return `masterPort ${p.masterPort} is not a port`;
  if (!(p.timeoutMs >= 0)) return `timeoutMs must be ≥ 0, got ${p.timeoutMs}`;
  return null;
}

/** Who is reading a link right now: the handshake or one receive. */
interface Consumer {
  onEvent(ev: WireEvent): void;
  onFail(err: GroupError): void;
}

/**
 * One simulated GPU rank's connection. Bytes are parsed only while a consumer is attached; with
 * none attached and bytes waiting, the socket is paused, so a master that broadcasts before the
 * engine asked to receive is held back by TCP flow control, as a NCCL send waits for its recv.
 */
class RankLink {
  private readonly reader = new FrameReader();
  private consumer: Consumer | null = null;
  private lost: GroupError | null = null;

  constructor(
    readonly rank: number,
    private readonly socket: Socket,
    onLost: (err: GroupError) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      this.reader.feed(chunk);
      this.pump();
    });
    socket.on('error', () => {}); // 'close' follows and carries the consequence
    socket.on('close', () => {
      this.lost = new GroupError('master_lost', `rank ${rank}: connection to the master closed`, rank);
      this.pump();
      this.consumer?.onFail(this.lost);
      onLost(this.lost);
    });
  }

  attach(consumer: Consumer): void {
    this.consumer = consumer;
    this.socket.resume();
    this.pump();
    if (this.lost) this.consumer?.onFail(this.lost);
  }

  detach(): void {
    this.consumer = null;
  }

  /** Fail whoever is reading (close() uses it to report `group_closed` rather than a lost link). */
  fail(err: GroupError): void {
    this.consumer?.onFail(err);
  }

  send(frame: Buffer): void {
    if (!this.socket.destroyed) this.socket.write(frame);
  }

  destroy(): void {
    this.socket.destroy();
  }

  private pump(): void {
    try {
      for (let ev = this.consumer && this.reader.next(); ev; ev = this.consumer && this.reader.next()) {
        this.consumer!.onEvent(ev);
      }
    } catch (err) {
      this.consumer?.onFail(err instanceof GroupError ? err : new GroupError('protocol_error', String(err), this.rank));
    }
    if (!this.consumer && this.reader.pending > 0 && !this.socket.destroyed) this.socket.pause();
  }
}

class Membership implements GroupMember {
  readonly groupName: string;
  private readonly links: RankLink[] = [];
  private readonly sockets = new Set<Socket>();
  private broken: GroupError | null = null;
  private closed = false;
  private receiving = false;

  constructor(private readonly params: JoinParams) {
    this.groupName = params.groupName;
  }

  async join(): Promise<void> {
    const { gpus, rankOffset, timeoutMs } = this.params;
    const deadline = Date.now() + timeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const code: GroupErrorCode = this.links.length < gpus ? 'master_unreachable' : 'rendezvous_timeout';
        reject(new GroupError(code, `group ${this.groupName}: not formed within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    try {
      const ranks = Array.from({ length: gpus }, (_, i) => rankOffset + i);
      await Promise.race([Promise.all(ranks.map((rank) => this.joinRank(rank, deadline))), expired]);
    } catch (err) {
      this.close();
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  async receive(tensors: TensorSpec[], timeoutMs: number): Promise<LoadedTensor[]> {
    if (this.closed) throw new GroupError('group_closed', `group ${this.groupName} is closed`);
    if (this.broken) throw new GroupError(this.broken.code, this.broken.message, this.broken.rank);
    if (this.receiving) throw new GroupError('busy', `group ${this.groupName}: a receive is already running`);
    const sizes = tensors.map(tensorBytes); // a bad spec rejects before any byte is consumed
    if (tensors.length === 0) return [];
    this.receiving = true;
    let timer: NodeJS.Timeout | undefined;
    try {
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new GroupError('receive_timeout', `group ${this.groupName}: ${tensors.length} tensors not received within ${timeoutMs} ms`)),
          timeoutMs,
        );
      });
      const perRank = await Promise.race([Promise.all(this.links.map((link) => receiveOn(link, tensors, sizes))), deadline]);
      const first = perRank[0]!;
      for (const [r, got] of perRank.entries()) {
        const differs = got.findIndex((t, i) => t.checksum !== first[i]!.checksum);
        if (differs >= 0) {
          throw new GroupError(
            'rank_disagreement',
            `rank ${this.links[r]!.rank} received other bytes than rank ${this.links[0]!.rank} for ${got[differs]!.name}`,
            this.links[r]!.rank,
          );
        }
      }
      return first;
    } catch (err) {
      // Mid-transfer failures leave the streams desynchronised: the membership cannot be reused.
      this.breakWith(err instanceof GroupError ? err : new GroupError('protocol_error', String(err)));
      throw err;
    } finally {
      clearTimeout(timer);
      this.receiving = false;
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new GroupError('group_closed', `group ${this.groupName} closed by the member`);
    for (const link of this.links) link.fail(err);
    for (const socket of this.sockets) socket.destroy();
  }

  private breakWith(err: GroupError): void {
    this.broken ??= err;
    for (const link of this.links) link.destroy();
  }

  private async joinRank(rank: number, deadline: number): Promise<void> {
    const { masterAddress, masterPort, worldSize, groupName } = this.params;
    const socket = await this.connectRank(masterAddress, masterPort, deadline);
    const link = new RankLink(rank, socket, (err) => {
      this.broken ??= err;
    });
    this.links.push(link);
    this.links.sort((a, b) => a.rank - b.rank);
    const formed = new Promise<void>((resolve, reject) => {
      link.attach({
        onEvent(ev) {
          if (ev.kind === 'frame' && ev.type === FrameType.formed) {
            link.detach();
            resolve();
          } else if (ev.kind === 'frame' && ev.type === FrameType.error) {
            const code = String(ev.body.code) as GroupErrorCode;
            throw new GroupError(code, `rank ${rank}: ${String(ev.body.message)}`, rank);
          } else {
            throw new GroupError('protocol_error', `rank ${rank}: unexpected ${ev.kind} before the group formed`, rank);
          }
        },
        onFail(err) {
          link.detach();
          reject(err);
        },
      });
    });
    link.send(encodeFrame(FrameType.hello, { protocol: PROTOCOL_VERSION, group: groupName, rank, world_size: worldSize }));
    await formed;
  }

  /** Connect, retrying while the master is not there yet, until the rendezvous deadline. */
  private async connectRank(host: string, port: number, deadline: number): Promise<Socket> {
    for (;;) {
      if (this.closed) throw new GroupError('group_closed', `group ${this.groupName} is closed`);
      const socket = connect({ host, port });
      this.sockets.add(socket);
      const failure = await new Promise<Error | null>((resolve) => {
        socket.once('connect', () => resolve(null));
        socket.once('error', resolve);
      });
      if (failure === null && !this.closed) return socket;
      socket.destroy();
      this.sockets.delete(socket);
      if (this.closed || Date.now() + RETRY_MS >= deadline) {
        throw new GroupError('master_unreachable', `${host}:${port}: ${failure?.message ?? 'closed'}`);
      }
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  }
}

/** Receive `tensors` whole on one rank, hashing as the bytes stream by; ack each one. */
function receiveOn(link: RankLink, tensors: TensorSpec[], sizes: number[]): Promise<LoadedTensor[]> {
  return new Promise((resolve, reject) => {
    const out: LoadedTensor[] = [];
    let hash: Hash | null = null;
    let seq = 0;
    let got = 0;
    let head: Buffer[] = [];
    let headLen = 0;
    link.attach({
      onEvent(ev: WireEvent) {
        const i = out.length;
        if (ev.kind === 'frame') {
          if (ev.type !== FrameType.tensor || hash) {
            throw new GroupError('protocol_error', `rank ${link.rank}: unexpected frame type ${ev.type}`, link.rank);
          }
          if (ev.body.bytes !== sizes[i]) {
            throw new GroupError(
              'size_mismatch',
              `rank ${link.rank}: tensor ${tensors[i]!.name} is ${sizes[i]} bytes, ` + `the master sent ${String(ev.body.bytes)} (${String(ev.body.name)})`,
              link.rank,
            );
          }
          seq = Number(ev.body.seq);
          hash = createHash('sha256');
          got = 0;
          head = [];
          headLen = 0;
        } else if (ev.kind === 'data') {
          hash!.update(ev.chunk);
          got += ev.chunk.length;
          if (headLen < HEAD_BYTES) {
            const part = ev.chunk.subarray(0, HEAD_BYTES - headLen);
            head.push(Buffer.from(part));
            headLen += part.length;
          }
        } else {
          // Like NCCL, the wire carries bytes, not names: the receiver's own spec names the tensor.
          out.push({ name: tensors[i]!.name, bytes: got, checksum: hash!.digest('hex'), head: Buffer.concat(head).toString('base64') });
          hash = null;
          link.send(encodeFrame(FrameType.ack, { seq }));
          if (out.length === tensors.length) {
            link.detach();
            resolve(out);
          }
        }
      },
      onFail(err) {
        link.detach();
        reject(err);
      },
    });
  });
}
