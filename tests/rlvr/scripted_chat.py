"""A scripted model behind an OpenAI-compatible ``/v1/chat/completions`` endpoint, for running other
hubs' own evaluation loops (verifiers' ``vf-eval``) without a model: the reply to a conversation is
``script[first user message][number of assistant turns so far]``; an unknown conversation gets "I
do not know"."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


class ScriptedChat:
    def __init__(self, script: dict[str, list[str]]):
        self.script = {k.strip(): v for k, v in script.items()}
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                owner.requests.append(body)
                messages = body.get("messages") or []
                users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
                turns = sum(m.get("role") == "assistant" for m in messages)
                replies = owner.script.get(users[0].strip() if users else "", [])
                reply = replies[turns] if turns < len(replies) else "I do not know"
                answer = {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                          "model": body.get("model", "scripted"),
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                if body.get("stream"):  # server-sent events: the reply in one chunk, then the finish and usage
                    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
                    chunks = [base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}]},
                              base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                              base | {"choices": [], "usage": answer["usage"]}]
                    data = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                    content_type = "text/event-stream"
                else:
                    data, content_type = json.dumps(answer).encode(), "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                data = json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
