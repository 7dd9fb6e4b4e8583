"""``python -m tests.llm_server --port 8090 [--latency-per-token 0.01] [--max-model-len 4096]``

``--port 0`` binds a free port first and prints ``listening on http://HOST:PORT`` (tests read it)."""

import argparse
import socket
import sys

import uvicorn

from tests.llm_server import FakeLLM, create_llm_app

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=8090)
parser.add_argument("--model", default="fake-llm")
parser.add_argument("--max-model-len", type=int, default=4096)
parser.add_argument("--latency-per-token", type=float, default=0.0)
parser.add_argument("--first-token-delay", type=float, default=0.0)
args = parser.parse_args()
llm = FakeLLM(model=args.model, max_model_len=args.max_model_len, latency_per_token_s=args.latency_per_token,
              first_token_delay_s=args.first_token_delay)
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((args.host, args.port))
port = sock.getsockname()[1]
print(f"listening on http://{args.host}:{port}", file=sys.stderr, flush=True)
uvicorn.Server(uvicorn.Config(create_llm_app(llm), host=args.host, port=port, log_level="warning")).run(sockets=[sock])
