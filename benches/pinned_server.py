#!/usr/bin/env python3
"""The echo workload's model server for benches/pinned.py, in a process of its own.

OpenAI chat completions, streamed (SSE): while a request holds fewer than K messages with
role "tool", the answer is one `echo` tool call with arguments {"i": n} (n = that count) and
id call_<n>; then the text "done". The same workload as `treadle-scripted --echo-until K`,
served outside the driver's process so that each side can be pinned to a core of its own.

uvloop + httptools when they import (pip install --user uvloop httptools), else plain
asyncio with a hand-written HTTP/1.1 parser; the first line printed says which, the second
the URL. Usage: pinned_server.py K [PORT]
"""

import asyncio
import json
import sys

try:
    import httptools
    import uvloop
except ImportError:  # the slower fallback below serves the same bytes
    httptools = None
    uvloop = None

# The count of tool results: both drivers write compact JSON (serde_json), so the
# substring is exact and saves parsing a body that grows with the conversation. The
# drivers check that every session made exactly K tool steps, so a miscount would fail
# the run, not skew it.
TOOL_ROLE = b'"role":"tool"'


def sse(obj):
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def chunk(delta, finish=None):
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def pieces(text, size=4):
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def usage_frame():
    u = chunk({})
    u["choices"] = []
    u["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return sse(u)


def tool_call_body(n):
    args = json.dumps({"i": n}, separators=(",", ":"))
    frames = [sse(chunk({"role": "assistant", "content": None}))]
    first = {"index": 0, "id": f"call_{n}", "type": "function",
             "function": {"name": "echo", "arguments": ""}}
    frames.append(sse(chunk({"tool_calls": [first]})))
    for p in pieces(args):
        frames.append(sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})))
    frames.append(sse(chunk({}, "tool_calls")))
    frames.append(usage_frame())
    frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


def text_body():
    frames = [sse(chunk({"role": "assistant", "content": ""}))]
    for p in pieces("done"):
        frames.append(sse(chunk({"content": p})))
    frames.append(sse(chunk({}, "stop")))
    frames.append(usage_frame())
    frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


def response(body):
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"cache-control: no-cache\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    return head + body


class Answers:
    """Every answer rendered once: K tool calls and the text."""

    def __init__(self, k):
        self.k = k
        self.calls = [response(tool_call_body(n)) for n in range(k)]
        self.text = response(text_body())

    def for_body(self, body):
        n = body.count(TOOL_ROLE)
        return self.calls[n] if n < self.k else self.text


class HttptoolsProtocol(asyncio.Protocol):
    def __init__(self, answers):
        self.answers = answers
        self.parser = httptools.HttpRequestParser(self)
        self.body = []
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.close()

    def on_message_begin(self):
        self.body = []

    def on_body(self, body):
        self.body.append(body)

    def on_message_complete(self):
        self.transport.write(self.answers.for_body(b"".join(self.body)))


class PlainProtocol(asyncio.Protocol):
    """HTTP/1.1 with content-length bodies only: what both drivers send."""

    def __init__(self, answers):
        self.answers = answers
        self.buf = b""
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.transport.write(self.answers.for_body(body))


async def serve(k, port):
    answers = Answers(k)
    proto = HttptoolsProtocol if httptools else PlainProtocol
    server = await asyncio.get_running_loop().create_server(
        lambda: proto(answers), "127.0.0.1", port, backlog=4096
    )
    bound = server.sockets[0].getsockname()[1]
    print("uvloop+httptools" if httptools else "asyncio (uvloop/httptools missing)", flush=True)
    print(f"http://127.0.0.1:{bound}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main():
    k = int(sys.argv[1])
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if uvloop:
        uvloop.run(serve(k, port))
    else:
        asyncio.run(serve(k, port))


if __name__ == "__main__":
    main()
