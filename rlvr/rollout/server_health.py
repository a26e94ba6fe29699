"""Whether a rollout server answers (`rollout.engine=vllm_server`), asked once before a run loads
anything: a run whose server is not there is refused in seconds, naming the address, instead of
after the model, optimizer and reference have loaded and the engine's own wait has run out."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from rlvr import UserError


def require_server(url: str, timeout_s: float = 5.0) -> None:
    """Raise `UserError` (one line naming ``url``) unless something answers ``GET url/health`` within
    ``timeout_s``. Any HTTP answer counts: a server still loading its model is waited for later."""
    address = url.rstrip("/")
    try:
        with urllib.request.urlopen(address + "/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answers; the engine reads what it says
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(f"rollout.engine=vllm_server: no rollout server answers at {url} ({reason}); "
                        "start one with `rlvr rollout serve --model MODEL` first (--engine hf without vLLM), or set "
                        "rollout.vllm.server_url (server_urls for several) to where they run") from None


__all__ = ["require_server"]
