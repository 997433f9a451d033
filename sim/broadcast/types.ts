// The contract between an engine simulator and the GPU-free broadcast group that stands in for
// NCCL. The SGLang and TokenSpeed simulators call `joinGroup` from their
// `init_weights_update_group` route; the trainer simulator opens the group as rank 0.

export type Dtype = 'float32' | 'bfloat16' | 'float16' | 'int64' | 'int32' | 'uint8' | 'int8' | 'bool' | 'float8_e4m3fn' | 'float8_e5m2';

export interface TensorSpec {
  name: string;
  dtype: string;
  shape: number[];
}

export interface LoadedTensor {
  name: string;
  bytes: number;
  /** Hex sha256 of the tensor bytes as received. */
  checksum: string;
  /** Base64 of the tensor's first bytes (up to HEAD_BYTES): what reading a parameter back shows. */
  head?: string;
}

/** How many leading bytes of each tensor are kept, so a parameter's first values can be read back. */
export const HEAD_BYTES = 64;

export interface JoinParams {
  masterAddress: string;
  masterPort: number;
  /** First rank of this engine; its GPUs take rankOffset .. rankOffset + gpus - 1. */
  rankOffset: number;
  worldSize: number;
  groupName: string;
  /** Number of GPUs this engine simulates (tp_size). */
  gpus: number;
  /** How long to wait for every rank to join. */
  timeoutMs: number;
}

/** One engine's membership: one TCP connection per simulated GPU rank. */
export interface GroupMember {
  readonly groupName: string;
  /**
   * Receive every tensor of one `update_weights_from_distributed` call, whole, on every local
   * rank. Resolves once all were received; rejects if the group breaks or the deadline passes.
   */
  receive(tensors: TensorSpec[], timeoutMs: number): Promise<LoadedTensor[]>;
  close(): void;
}

export type JoinGroup = (params: JoinParams) => Promise<GroupMember>;

/** Where a group meets, from the trainer's init call (SGLang's and TokenSpeed's field names alike). */
export function rendezvousOf(b: Record<string, unknown>): { masterAddress: string; masterPort: number; rankOffset: number; worldSize: number } {
  return {
    masterAddress: b.master_address as string,
    masterPort: b.master_port as number,
    rankOffset: b.rank_offset as number,
    worldSize: b.world_size as number,
  };
}

/** The join of one engine to a group the trainer announced (its init call's fields). */
export function joinParamsOf(
  group: { masterAddress: string; masterPort: number; rankOffset: number; worldSize: number },
  groupName: string,
  gpus: number,
  timeoutMs: number,
): JoinParams {
  const { masterAddress, masterPort, rankOffset, worldSize } = group;
  return { masterAddress, masterPort, rankOffset, worldSize, groupName, gpus, timeoutMs };
}
