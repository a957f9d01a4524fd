#!/usr/bin/env python3
"""The scripted hub for tests/vm/run.sh: an OpenAI-compatible chat endpoint on the
host's loopback (the VM reaches it as 10.0.2.2 through qemu's user network). Every
request's JSON body is appended to REQUESTS (one per line) for the host to check, and
every request gets the same reply, streamed as server-sent events when asked to.

    hub.py PORT_FILE REQUESTS REPLY

Binds a free port and writes it to PORT_FILE once listening.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 4 << 20

port_file, requests_file, reply = sys.argv[1:4]


class Hub(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        if not 0 < length <= MAX_BODY:
            self.send_error(413 if length else 411)
            return
        body = json.loads(self.rfile.read(length))
        with open(requests_file, "a") as f:
            f.write(json.dumps(body) + "\n")
        if body.get("stream"):
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": reply}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            kind = "text/event-stream"
        else:
            data = json.dumps(
                {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}
            )
            kind = "application/json"
        payload = data.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, fmt, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))

os.rename(port_file + ".tmp", port_file)
server.serve_forever()
