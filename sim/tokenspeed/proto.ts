// The simulator's view of the wire: loads `proto/tokenspeed_scheduler.proto` (with common.proto)
// and `proto/grpc/health/v1/health.proto` through @grpc/proto-loader, and converts plain JSON to
// google.protobuf.Struct. It owns the loader options; it never serves a call.

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';

export const PROTO_DIR = fileURLToPath(new URL('../../proto/', import.meta.url));

/** The options proto/README.md documents: 64-bit integers as strings, field names as written. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

export const SCHEDULER_SERVICE = 'tokenspeed.grpc.scheduler.TokenSpeedScheduler';

export interface LoadedProtos {
  scheduler: grpc.ServiceDefinition;
  health: grpc.ServiceDefinition;
}

let cached: LoadedProtos | null = null;

export function loadProtos(): LoadedProtos {
  if (cached) return cached;
  const definition = protoLoader.loadSync(['tokenspeed_scheduler.proto', 'grpc/health/v1/health.proto'], LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    tokenspeed: { grpc: { scheduler: { TokenSpeedScheduler: grpc.ServiceClientConstructor } } };
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  cached = {
    scheduler: pkg.tokenspeed.grpc.scheduler.TokenSpeedScheduler.service,
    health: pkg.grpc.health.v1.Health.service,
  };
  return cached;
}

/** google.protobuf.Value as proto-loader encodes it (one `kind` member set). */
export type StructValue =
  | { nullValue: 'NULL_VALUE' }
  | { numberValue: number }
  | { stringValue: string }
  | { boolValue: boolean }
  | { structValue: StructMessage }
  | { listValue: { values: StructValue[] } };

export interface StructMessage {
  fields: Record<string, StructValue>;
}

function toValue(v: unknown): StructValue {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  if (typeof v === 'object') return { structValue: toStruct(v as Record<string, unknown>) };
  return { stringValue: String(v) };
}

/** Plain JSON object → Struct (undefined values are dropped, as Python's Struct.update does). */
export function toStruct(obj: Record<string, unknown>): StructMessage {
  const fields: Record<string, StructValue> = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) fields[k] = toValue(v);
  return { fields };
}
