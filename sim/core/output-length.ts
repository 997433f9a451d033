// How long the realistic cost model lets a request run when nothing forces its length: a
// lognormal draw (median and sigma from the options) seeded by the engine's random seed and the
// request's own sampler seed, so the same request on the same engine always stops at the same
// token. Pure: no clock, no global random state.

/** A deterministic uniform in (0, 1) from two 32-bit seeds (splitmix32 over their mix). */
function uniform(a: number, b: number, salt: number): number {
  let x = (Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + salt, 0xc2b2ae35)) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x21f0aaad);
  x = Math.imul(x ^ (x >>> 15), 0x735a2d97);
  x = (x ^ (x >>> 15)) >>> 0;
  return (x + 0.5) / 4294967296;
}

/** The drawn length (at least 1 token): where the model emits its end-of-sequence token. */
export function outputLength(randomSeed: number, requestSeed: number, median: number, sigma: number): number {
  // Box-Muller: one standard normal from two uniforms.
  const u1 = uniform(randomSeed, requestSeed, 1);
  const u2 = uniform(randomSeed, requestSeed, 2);
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  return Math.max(1, Math.round(median * Math.exp(sigma * z)));
}
