// The plumbing every simulator's HTTP server shares: each request handed over with its whole
// body, listening (port 0 = any free one), closing with every connection dropped (hung and
// streaming ones too, as a dead process's would), and the admin servers on 127.0.0.1. It never
// decides what a request means.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EMPTY } from './reply.ts';

export type BodyHandler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;

/** A request listener that calls `handle` with the whole body; a request that errors mid-body is dropped. */
export function withBody(handle: BodyHandler): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => res.destroy());
    req.on('end', () => handle(req, res, chunks.length === 0 ? EMPTY : chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)));
  };
}

/**
 * An engine-facing server: no request timeout (a weight load or a held call may take minutes),
 * keep-alive longer than the gateway's pools, and a malformed request drops its socket.
 */
export function engineServer(handle: BodyHandler): Server {
  const server = createServer({ noDelay: true, requestTimeout: 0, keepAliveTimeout: 65_000 }, withBody(handle));
  server.on('clientError', (_err, socket) => socket.destroy());
  return server;
}

/** Listens on `host:port`; resolves with the bound port. */
export function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** Stops listening and drops every connection; resolves once the server has closed. */
export function shut(server: Server): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  return closed;
}

export interface LocalServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** An admin server: 127.0.0.1 only, no key, each request handed over with its whole body. */
export async function serveLocal(port: number, handle: BodyHandler): Promise<LocalServer> {
  const server = createServer(withBody(handle));
  const bound = await listen(server, port, '127.0.0.1');
  return { url: `http://127.0.0.1:${bound}`, port: bound, close: () => shut(server) };
}
