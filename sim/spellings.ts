// SGLang's spellings of the launch flags the simulators share (`--tp 2`, `--tensor-parallel-size 2`,
// `--dp`, `--model-path`, `--max-running-requests`...) and each simulator's own name for the same
// setting, so one set of engine flags can go to a fleet of mixed kinds (`rlgate serve ... -- FLAGS`).
// It only renames flags; each simulator still parses and refuses them itself.

export type SimKind = 'sglang' | 'tokenspeed' | 'zmq';

/**
 * SGLang's spellings → the setting. `--tp`, `--dp` and `--pp` are what SGLang's argparse accepts as
 * abbreviations of `--tp-size`, `--dp-size` and `--pp-size`, and what its documentation writes.
 */
const SETTING: Record<string, string> = {
  '--tp': 'tp',
  '--tp-size': 'tp',
  '--tensor-parallel-size': 'tp',
  '--dp': 'dp',
  '--dp-size': 'dp',
  '--data-parallel-size': 'dp',
  '--pp': 'pp',
  '--pp-size': 'pp',
  '--pipeline-parallel-size': 'pp',
  '--model': 'model',
  '--model-path': 'model',
  '--max-running': 'running',
  '--max-running-requests': 'running',
};

/** Each simulator's flag for a setting; a setting a simulator lacks is left as written (it refuses it). */
const OWN: Record<SimKind, Record<string, string>> = {
  sglang: { tp: '--tp-size', dp: '--dp-size', pp: '--pp-size', model: '--model', running: '--max-running' },
  // TokenSpeed reports tensor parallelism as attn_tp_size and has no pipeline parallelism flag.
  tokenspeed: { tp: '--attn-tp-size', dp: '--dp-size', model: '--model', running: '--max-running-requests' },
  zmq: { tp: '--tp-size', dp: '--dp-size', pp: '--pp-size', model: '--model', running: '--max-running' },
};

/** `argv` with every SGLang spelling renamed to the `kind` simulator's flag (`--flag=value` kept joined). */
export function simFlags(kind: SimKind, argv: readonly string[]): string[] {
  return argv.map((arg) => {
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const setting = SETTING[flag];
    const own = setting === undefined ? undefined : OWN[kind][setting];
    if (own === undefined) return arg;
    return eq > 0 ? `${own}${arg.slice(eq)}` : own;
  });
}
