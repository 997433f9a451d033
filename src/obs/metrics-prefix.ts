// The first word of every Prometheus series name (`--metrics-prefix`): its default and what it may
// be. Apart from obs/metrics.ts so that reading the config does not load prom-client.

export const DEFAULT_METRICS_PREFIX = 'rlgate';

/** A Prometheus name start; `_` joins it to each stem (`rlgate` + `rl_refits_total`). */
export const METRICS_PREFIX_PATTERN = /^[a-zA-Z][a-zA-Z0-9_]*$/;
