// Each phase of a refit has a deadline of its own. The defaults come from the gateway's control
// timeout; a request may name any of them (`deadlines_ms`). A phase that waits on
// engines never waits past a minute by default: a hung engine must not hold the others paused.

import type { RefitRequest } from '../wire/refit-request.ts';

export interface RefitDefaults {
  pauseMs: number;
  refitMs: number;
  verifyMs: number;
  resumeMs: number;
}

/** The phases' deadlines when the request names none: the load gets the whole control timeout. */
export function defaultDeadlines(controlTimeoutSecs: number): RefitDefaults {
  const ms = controlTimeoutSecs * 1000;
  const short = Math.min(60_000, ms);
  return { pauseMs: short, refitMs: ms, verifyMs: short, resumeMs: short };
}

/** The request's `deadlines_ms` over the defaults (a zero or absent field keeps the default). */
export function deadlinesOf(defaults: RefitDefaults, d: RefitRequest['deadlines_ms']): RefitDefaults {
  const out = { ...defaults };
  if (d?.pause) out.pauseMs = d.pause;
  if (d?.refit) out.refitMs = d.refit;
  if (d?.verify) out.verifyMs = d.verify;
  if (d?.resume) out.resumeMs = d.resume;
  return out;
}
