"""A Python gRPC client generated from rlgate's proto/ with Debian's protoc, calling a TokenSpeed
simulator: Generate (streamed) and GetServerInfo. Prints one JSON object with what it saw.
Usage: ts_client.py GEN_DIR HOST:PORT"""

import json
import sys

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

import tokenspeed_scheduler_pb2 as pb  # noqa: E402
import tokenspeed_scheduler_pb2_grpc as pb_grpc  # noqa: E402


def main():
    with grpc.insecure_channel(sys.argv[2]) as channel:
        stub = pb_grpc.TokenSpeedSchedulerStub(channel)
        req = pb.GenerateRequest(
            request_id="py-1",
            tokenized=pb.TokenizedInput(input_ids=[1, 2, 3]),
            sampling_params=pb.SamplingParams(max_new_tokens=3, skip_special_tokens=True, spaces_between_special_tokens=True),
            stream=True,
        )
        chunks, complete = [], None
        for resp in stub.Generate(req, timeout=30):
            kind = resp.WhichOneof("response")
            if kind == "chunk":
                chunks.append({
                    "token_ids": list(resp.chunk.token_ids),
                    "weight_version": resp.chunk.weight_version if resp.chunk.HasField("weight_version") else None,
                })
            elif kind == "complete":
                complete = {
                    "output_ids": list(resp.complete.output_ids),
                    "finish_reason": resp.complete.finish_reason,
                    "weight_version": resp.complete.weight_version if resp.complete.HasField("weight_version") else None,
                }
        info = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=10)
        print(json.dumps({
            "chunks": chunks,
            "complete": complete,
            "server_args": json_format.MessageToDict(info.server_args),
            "is_paused": info.is_paused,
        }))


if __name__ == "__main__":
    main()
