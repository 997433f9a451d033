"""A TokenSpeed-shaped gRPC server written in Python from rlgate's proto/ (generated with Debian's
protoc): the cross-language check that a non-Node peer speaking the same wire serves the gateway.
It stamps weight_version on every chunk and complete. Usage: ts_server.py GEN_DIR PORT VERSION"""

import json
import sys
from concurrent import futures

sys.path.insert(0, sys.argv[1])

import grpc  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402

import tokenspeed_scheduler_pb2 as pb  # noqa: E402
import tokenspeed_scheduler_pb2_grpc as pb_grpc  # noqa: E402

VERSION = sys.argv[3]


class Scheduler(pb_grpc.TokenSpeedSchedulerServicer):
    def Generate(self, request, context):
        n = request.sampling_params.max_new_tokens if request.sampling_params.HasField("max_new_tokens") else 4
        ids = [100 + i for i in range(n)]
        if request.stream:
            for i, tok in enumerate(ids):
                yield pb.GenerateResponse(
                    request_id=request.request_id,
                    chunk=pb.GenerateStreamChunk(
                        token_ids=[tok],
                        prompt_tokens=len(request.tokenized.input_ids),
                        completion_tokens=i + 1,
                        weight_version=VERSION,
                    ),
                )
        yield pb.GenerateResponse(
            request_id=request.request_id,
            complete=pb.GenerateComplete(
                output_ids=ids,
                finish_reason="length",
                prompt_tokens=len(request.tokenized.input_ids),
                completion_tokens=len(ids),
                weight_version=VERSION,
            ),
        )

    def HealthCheck(self, request, context):
        return pb.HealthCheckResponse(healthy=True, message="ok")

    def GetModelInfo(self, request, context):
        return pb.GetModelInfoResponse(model_path="py-model", served_model_name="py-model", vocab_size=32000, weight_version=VERSION)

    def GetServerInfo(self, request, context):
        args = struct_pb2.Struct()
        args.update({"model": "py-model", "served_model_name": "py-model", "attn_tp_size": 1, "weight_version": VERSION})
        return pb.GetServerInfoResponse(server_args=args, tokenspeed_version="py-test")


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_TokenSpeedSchedulerServicer_to_server(Scheduler(), server)
    port = server.add_insecure_port(f"127.0.0.1:{sys.argv[2]}")
    server.start()
    print(json.dumps({"event": "listening", "port": port}), flush=True)
    try:
        sys.stdin.read()  # until the test closes our stdin
    finally:
        server.stop(0)


if __name__ == "__main__":
    main()
