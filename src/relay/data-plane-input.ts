// Shape checks for data-plane request bodies, done at the gateway so a malformed request is a
// 4xx JSON error of ours and never reaches an engine. Only the fields whose types we can vouch
// for are checked; unknown fields pass through untouched on the HTTP path.

import { TypeCompiler } from '@sinclair/typebox/compiler';
import { ChatRequest, CompletionRequest, GenerateRequest } from '../api/generate-schema.ts';
import { GatewayError } from '../api/errors.ts';
import { parseJsonObject } from '../api/json-object.ts';

// The same schemas the API document shows: what is documented is what is checked.
const CHECKS = {
  '/generate': TypeCompiler.Compile(GenerateRequest),
  '/v1/chat/completions': TypeCompiler.Compile(ChatRequest),
  '/v1/completions': TypeCompiler.Compile(CompletionRequest),
};

export type DataPlanePath = keyof typeof CHECKS;

/** Parses and checks one data-plane body; throws `invalid_request` (400) naming the field. */
export function checkDataPlaneBody(path: DataPlanePath, raw: Buffer | null): Record<string, unknown> {
  const value = parseJsonObject(raw, 'invalid_request');
  const check = CHECKS[path];
  if (!check.Check(value)) {
    const first = check.Errors(value).First();
    const field = first?.path || '/';
    throw new GatewayError('invalid_request', `invalid field \`${field}\`: ${first?.message ?? 'wrong type'}`, { field });
  }
  return value as Record<string, unknown>;
}
