#!/usr/bin/env python3
"""Treadle's launcher for the local test model.

Runs the llama.cpp HTTP server that ships inside the `xllamacpp` wheel, with the
settings treadle relies on: loopback only, one slot, no prompt cache (so a given
request always yields the same completion), jinja templating with our own
tool-call template. `scripts/local-model` starts this in the background; it can
also be run by hand:

    python local_model_server.py --model M.gguf --template T.jinja --port 8091
"""
import argparse
import os
import signal
import sys
import threading


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="path to the GGUF file")
    ap.add_argument("--template", required=True, help="path to the chat template (jinja)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--ctx", type=int, default=8192, help="context window in tokens")
    ap.add_argument("--max-tokens", type=int, default=512,
                    help="most tokens one answer may generate (a request asking more gets this)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--alias", action="append", default=[],
                    help="model name(s) the server reports; repeatable")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    for path, what in ((args.model, "model"), (args.template, "template")):
        if not os.path.isfile(path):
            print(f"local_model_server: {what} file not found: {path}", file=sys.stderr)
            return 2
    try:
        import xllamacpp
    except ImportError as exc:
        print(f"local_model_server: cannot import xllamacpp ({exc}); run 'scripts/local-model start'",
              file=sys.stderr)
        return 2

    with open(args.template, encoding="utf-8") as fh:
        template = fh.read()

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = set(args.alias or ["qwen2.5-coder-0.5b"])
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    # A 0.5B model can fall into repeating itself until the context is full: 4,500 tokens,
    # nine minutes at 8 tokens/s on a loaded machine. The cap bounds every answer; the
    # tests that use this model want a sentence or a tool call, far below it.
    params.n_predict = args.max_tokens
    params.n_parallel = 1                 # a single slot: requests are served one after another
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.use_jinja = True
    params.chat_template = template
    params.cache_prompt = False           # reusing KV cache across requests changes the output

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())

    try:
        server = xllamacpp.Server(params)  # loads the model and starts the HTTP thread
    except RuntimeError as exc:
        print(f"local_model_server: server did not start ({exc}); see the lines above "
              f"(port {args.port} in use? bad model file?)", file=sys.stderr, flush=True)
        return 1
    print(f"local_model_server: pid {os.getpid()} listening on {server.listening_address}",
          flush=True)
    done.wait()
    print("local_model_server: stopping", flush=True)
    sys.stdout.flush()
    # The native server thread does not need an orderly shutdown; leave at once.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
