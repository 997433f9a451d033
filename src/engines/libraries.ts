// The engine wires' libraries, loaded at their first use instead of at start-up: undici (HTTP
// engines, control calls), gRPC and its proto loader (TokenSpeed engines), ZeroMQ and msgpackr
// (ZMQ engines), the Hugging Face tokenizers and jinja (token routes). Together they are a third
// of a gateway's start-up CPU, and a fleet without gRPC or ZMQ engines never needs those at all.
// Each is taken through its CommonJS build, which `require` loads synchronously: the first client
// of a kind is built on the spot and every API around them stays synchronous. Never starts
// anything: loading a library opens no socket.

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/** A library's module, required once on the first call. */
function onFirstUse<T>(name: string): () => T {
  let lib: T | undefined;
  return () => (lib ??= require(name) as T);
}

export const undici = onFirstUse<typeof import('undici')>('undici');
export const grpcJs = onFirstUse<typeof import('@grpc/grpc-js')>('@grpc/grpc-js');
export const protoLoader = onFirstUse<typeof import('@grpc/proto-loader')>('@grpc/proto-loader');
export const zeromq = onFirstUse<typeof import('zeromq')>('zeromq');
export const msgpackr = onFirstUse<typeof import('msgpackr')>('msgpackr');
export const hfTokenizers = onFirstUse<typeof import('@huggingface/tokenizers')>('@huggingface/tokenizers');
export const jinja = onFirstUse<typeof import('@huggingface/jinja')>('@huggingface/jinja');
