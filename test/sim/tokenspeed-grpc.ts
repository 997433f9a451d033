// A gRPC client for the TokenSpeed simulator tests, built straight from `proto/` with the loader
// options proto/README.md documents (not through the simulator's own loader, so a wire bug there
// cannot hide), plus helpers that collect a server stream or a unary answer with its status.

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

const definition = protoLoader.loadSync(['tokenspeed_scheduler.proto', 'grpc/health/v1/health.proto'], {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
});
const pkg = grpc.loadPackageDefinition(definition) as any;

export type Client = grpc.Client & Record<string, any>;

export function schedulerClient(address: string): Client {
  return new pkg.tokenspeed.grpc.scheduler.TokenSpeedScheduler(address, grpc.credentials.createInsecure()) as Client;
}

export function healthClient(address: string): Client {
  return new pkg.grpc.health.v1.Health(address, grpc.credentials.createInsecure()) as Client;
}

export interface UnaryResult {
  value: any;
  error: grpc.ServiceError | null;
}

export function unary(client: Client, method: string, request: object = {}, deadlineMs = 20_000): Promise<UnaryResult> {
  return new Promise((resolve) => {
    client[method](request, { deadline: Date.now() + deadlineMs }, (error: grpc.ServiceError | null, value: any) => {
      resolve({ value: value ?? null, error });
    });
  });
}

export interface StreamResult {
  messages: any[];
  /** null when the stream ended with OK. */
  error: grpc.ServiceError | null;
}

/** Collects every message of a server stream and how it ended. */
export function collect(
  client: Client,
  method: string,
  request: object,
  onMessage?: (m: any, call: grpc.ClientReadableStream<any>) => void,
): Promise<StreamResult> {
  return new Promise((resolve) => {
    const messages: any[] = [];
    const call = client[method](request) as grpc.ClientReadableStream<any>;
    let error: grpc.ServiceError | null = null;
    call.on('data', (m: any) => {
      messages.push(m);
      onMessage?.(m, call);
    });
    call.on('error', (e: grpc.ServiceError) => {
      error = e;
    });
    call.on('status', () => setImmediate(() => resolve({ messages, error })));
  });
}

/** A stream the test reads step by step (first message, then the rest). */
export function open(
  client: Client,
  method: string,
  request: object,
): { call: grpc.ClientReadableStream<any>; result: Promise<StreamResult>; first: Promise<any> } {
  const messages: any[] = [];
  const call = client[method](request) as grpc.ClientReadableStream<any>;
  let error: grpc.ServiceError | null = null;
  let gotFirst: (m: any) => void = () => {};
  const first = new Promise<any>((r) => {
    gotFirst = r;
  });
  call.on('data', (m: any) => {
    messages.push(m);
    if (messages.length === 1) gotFirst(m);
  });
  call.on('error', (e: grpc.ServiceError) => {
    error = e;
  });
  const result = new Promise<StreamResult>((resolve) => call.on('status', () => setImmediate(() => resolve({ messages, error }))));
  return { call, result, first };
}

/** google.protobuf.Struct as decoded → plain JSON. */
export function plain(struct: any): Record<string, any> {
  const value = (v: any): any => {
    switch (v.kind) {
      case 'structValue':
        return plain(v.structValue);
      case 'listValue':
        return (v.listValue.values ?? []).map(value);
      case 'nullValue':
        return null;
      default:
        return v[v.kind];
    }
  };
  const out: Record<string, any> = {};
  for (const [k, v] of Object.entries(struct?.fields ?? {})) out[k] = value(v);
  return out;
}

export const grpcStatus = grpc.status;
