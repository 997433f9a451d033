// The error catalogue: every error a client can cause, with its stable code, HTTP status and
// context fields. Domain modules throw GatewayError; the one fastify error handler turns it into
// `{error, message, ...context}`. Codes and statuses are SMG's.

export const ErrorStatus = {
  invalid_engine_path: 400,
  selector_required: 400,
  invalid_selector: 400,
  no_workers_match: 400,
  worker_not_found: 404,
  invalid_version: 400,
  invalid_body: 400,
  invalid_version_policy: 400,
  invalid_request: 400,
  invalid_request_shape: 422,
  unsupported_connection_mode: 422,
  no_control_endpoint: 422,
  upstream_unreachable: 502,
  upstream_timeout: 504,
  logprobs_unavailable: 502,
  unauthorized: 401,
  origin_not_allowed: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  refit_not_found: 404,
  refit_in_progress: 409,
  no_eligible_targets: 409,
  refit_id_conflict: 409,
  strategy_unsupported: 409,
  model_not_found: 404,
  tokenizer_not_found: 400,
  no_available_workers: 503,
  bus_unavailable: 503,
  overloaded: 503,
  internal_error: 500,
} as const;

export type ErrorCode = keyof typeof ErrorStatus;

export type ErrorContext = Record<string, string | number | boolean | null | undefined | readonly object[]>;

export class GatewayError extends Error {
  override readonly name = 'GatewayError';
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly context: ErrorContext = {},
  ) {
    super(message);
    this.status = ErrorStatus[code];
  }

  /** The wire envelope: context fields are top-level siblings of `error` and `message`. */
  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = { error: this.code, message: this.message };
    for (const [k, v] of Object.entries(this.context)) if (v !== undefined) out[k] = v;
    return out;
  }
}
