// The shape in which every simulator records one HTTP request it saw (its `GET /_sim/requests`
// answer), shared so tests and simulators read one type. A type only: recording is each
// simulator's recorder.

import type { IncomingHttpHeaders } from 'node:http';

export interface RecordedRequest {
  /** 1-based arrival order since start (not reset by clearing). */
  seq: number;
  /** ISO-8601 arrival time. */
  time: string;
  method: string;
  path: string;
  /** Raw query string without '?', '' when absent. */
  query: string;
  headers: IncomingHttpHeaders;
  /** Body as UTF-8 text ('' when there was none). */
  body: string;
  bodyBytes: number;
  httpVersion: string;
  /** The client's port: requests with the same one came over the same connection. */
  remotePort?: number;
}
