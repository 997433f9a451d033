// The `rlgate sim tokenspeed` command line: flag parsing (`--flag value` and `--flag=value`,
// unknown flags refused) into simulator options, and the --help text. `--servicer-impl` is kept
// raw here: main.ts resolves it against the environment. It never starts anything.

import { FaultError } from '../core/faults.ts';
import { costModelHelp, readCostFlag } from '../core/cost-model.ts';
import { flagJson, flagNumber } from '../core/flags.ts';
import { readEngineFlags, type CommandLine } from '../core/options.ts';
import { parseFaults, type FaultRule } from './faults.ts';
import type { StampMode, TokenspeedSimOptions } from './options.ts';

export interface CliOptions extends CommandLine {
  options: TokenspeedSimOptions;
  /** `--servicer-impl` as given (validated later, flag > env > default). */
  servicerImplFlag: string | undefined;
}

export const HELP = `Usage: rlgate sim tokenspeed [flags]

A TokenSpeed-shaped gRPC engine with its HTTP RL control app.
Prints {"event":"listening","url":"grpc://...","port":...,"control_url":...,"control_port":...,
"admin_url":...,"servicer_impl":...,"servicer_impl_source":...} on stdout when ready;
SIGTERM/SIGINT stop it (health NOT_SERVING, in-flight requests drain, then exit 0).

  --host <addr>                  gRPC bind address (default 127.0.0.1)
  --port <n>                     gRPC port, 0 = any free port (default 0)
  --admin-port <n>               /_sim/* admin server on 127.0.0.1, 0 = any free port (default 0)
  --rl-control-port <n>          start the RL control app on this port (0 = any free port)
  --rl-control-host <addr>       control app bind address (default 127.0.0.1)
  --rl-control-api-key <key>     every control route needs "Authorization: Bearer <key>"
  --rl-update-from <list>        supported refit sources, comma-separated (default distributed)
  --no-rl-advertise              run the control app but merge no rl.* keys into GetServerInfo
  --servicer-impl python|rust    servicer personality (env SMG_TOKENSPEED_SERVICER_IMPL; default python)
  --model <name>                 model (also served_model_name unless --served-model-name)
  --served-model-name <name>
  --tokenizer <path>             tokenizer path reported by GetModelInfo (default = --model)
  --no-tokenizer                 no tokenizer path: GetTokenizer answers FAILED_PRECONDITION
  --weight-version <v>           initial weight_version (default "default")
  --stamp-weight-version <v>     live | none | a fixed string on every chunk and complete
                                 (default: live for python, none for rust)
  --attn-tp-size <n|none>        attn_tp_size in server_args; GPUs joined to a broadcast group
                                 (default 1; none leaves the key out, as a bare launch of older builds)
  --dp-size <n>                  attention-DP width (data_parallel_size; dp_size when > 1)
  --token-rate <r>               tokens/s per request; 0 or inf = as fast as possible (default 2000)
  --max-running-requests <n>     running requests; the rest wait (default 256)
${costModelHelp(33)}  --context-length <n>           longest prompt (default 32768)
  --enable-output-logprobs       Generate returns output logprobs when asked (default off)
  --kv-events-config <json|off>  KV events ('{"enable_kv_cache_events": true, "publisher": "zmq"}');
                                 rust turns them on by default (env SMG_TOKENSPEED_SERVICER_KV_EVENTS=0 off)
  --kv-load-interval <ms>        load-only KV batches on event streams (default 1000)
  --kvstore-storage-backend <b>  pretend L3 KV storage is configured
  --version <v>                  tokenspeed_version (default 0.2.0)
  --server-arg <key=value>       extra ServerArgs key (value parsed as JSON when it parses), repeatable
  --fault <json>                 a fault object or list, repeatable (see sim/tokenspeed/README.md)
  --group-timeout <ms>           broadcast-group rendezvous/receive deadline (default 120000)
  --record-limit <n>             records kept for /_sim/requests and /_sim/rpcs, 0 = off (default 10000)
  --drain-secs <s>               SIGTERM drain window (default: rust SMG_TOKENSPEED_SERVICER_DRAIN_SECS, else 5)
  --exit-on-stdin-close          stop when stdin reaches EOF (for harnesses that spawn it)
  --help                         this text
`;

function stampOf(v: string): StampMode {
  const t = v.trim();
  if (t.toLowerCase() === 'none') return { kind: 'none' };
  if (t.toLowerCase() === 'live') return { kind: 'live' };
  if (t === '') throw new Error('--stamp-weight-version needs live, none or a version string');
  return { kind: 'fixed', value: t };
}

function serverArg(raw: string, into: Record<string, unknown>): void {
  const eq = raw.indexOf('=');
  if (eq <= 0) throw new Error(`--server-arg needs key=value, got ${raw}`);
  const value = raw.slice(eq + 1);
  try {
    into[raw.slice(0, eq)] = JSON.parse(value);
  } catch {
    into[raw.slice(0, eq)] = value;
  }
}

export function parseArgs(argv: readonly string[]): CliOptions {
  const o: TokenspeedSimOptions = {};
  const faults: FaultRule[] = [];
  const extra: Record<string, unknown> = {};
  let servicerImplFlag: string | undefined;
  const line = readEngineFlags(argv, o, (flag, next) => {
    switch (flag) {
      case '--host':
        o.host = next();
        break;
      case '--port':
        o.port = flagNumber(flag, next());
        break;
      case '--admin-port':
        o.adminPort = flagNumber(flag, next());
        break;
      case '--rl-control-port':
        o.rlControlPort = flagNumber(flag, next());
        break;
      case '--rl-control-host':
        o.rlControlHost = next();
        break;
      case '--rl-control-api-key':
        o.rlControlApiKey = next();
        break;
      case '--rl-update-from':
        o.rlUpdateFrom = next().split(',');
        break;
      case '--no-rl-advertise':
        o.rlAdvertise = false;
        break;
      case '--servicer-impl':
        servicerImplFlag = next();
        break;
      case '--served-model-name':
        o.servedModelName = next();
        break;
      case '--tokenizer':
        o.tokenizerPath = next();
        break;
      case '--no-tokenizer':
        o.tokenizerPath = '';
        break;
      case '--stamp-weight-version':
        o.stamp = stampOf(next());
        break;
      case '--attn-tp-size': {
        const v = next();
        o.attnTpSize = v === 'none' ? null : flagNumber(flag, v);
        break;
      }
      case '--dp-size':
      case '--data-parallel-size':
        o.dpSize = flagNumber(flag, next());
        break;
      case '--max-running-requests':
      case '--max-running':
        o.maxRunningRequests = flagNumber(flag, next());
        break;
      case '--enable-output-logprobs':
        o.enableOutputLogprobs = true;
        break;
      case '--kv-events-config':
        o.kvEventsConfig = next();
        break;
      case '--kv-load-interval':
        o.kvLoadIntervalMs = flagNumber(flag, next());
        break;
      case '--kvstore-storage-backend':
        o.kvstoreStorageBackend = next();
        break;
      case '--server-arg':
        serverArg(next(), extra);
        break;
      case '--fault': {
        const parsed = flagJson(flag, next());
        try {
          faults.push(...parseFaults(parsed));
        } catch (e) {
          throw new Error(`--fault: ${(e as FaultError).message}`);
        }
        break;
      }
      case '--drain-secs':
        o.drainMs = flagNumber(flag, next()) * 1000;
        break;
      default:
        return readCostFlag(flag, next, o);
    }
    return true;
  });
  if (faults.length > 0) o.faults = faults;
  if (Object.keys(extra).length > 0) o.serverArgs = extra;
  return { options: o, servicerImplFlag, ...line };
}
