"""Callback mode: serve HandlerService so that the sidecar calls the app.

For subscriptions with ``delivery: callback`` and ``app_address`` in
spoold's config. The same handler as for subscribe() works here; the call's
deadline is the delivery's lease (there is no extension in callback mode).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import inspect
import logging
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import grpc.aio

from spool._message import Message
from spool._outcome import Outcome, exception_text, settlement_for
from spool._types import Handler
from spool._trace import handler_span, handler_tracer, record_outcome
from spool.v1 import handler_pb2, handler_pb2_grpc, message_pb2

__all__ = ["DEFAULT_HANDLER_ADDRESS", "HandlerServer", "serve_handler"]

log = logging.getLogger("spool")

#: Where a callback server listens unless told otherwise: loopback (the
#: sidecar is in the same pod), on a port none of spoold's (app 7070, admin
#: 7071, cluster 7072, probe 7073). The same in every SDK.
DEFAULT_HANDLER_ADDRESS = "127.0.0.1:7080"


def _loopback_if_no_host(address: str) -> str:
    """``:port`` means loopback, not every interface."""
    if address.startswith(":"):
        return "127.0.0.1" + address
    return address


class _TokenCheck:
    """Compares a call's ``authorization: Bearer <token>`` with the token in
    constant time (SHA-256 digests, so neither the length nor the bytes of
    the token show in the time taken)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("spool: serve_handler: token is empty: pass the token of spoold's app_token_file, or None")
        self._digest = hashlib.sha256(token.encode()).digest()

    def allows(self, metadata: Any) -> bool:
        given = ""
        for key, value in metadata or ():
            if key == "authorization":
                given = value if isinstance(value, str) else value.decode("latin-1")
        scheme, _, tok = given.partition(" ")
        ok = hmac.compare_digest(hashlib.sha256(tok.encode()).digest(), self._digest)
        return ok and scheme.lower() == "bearer"


class _Servicer(handler_pb2_grpc.HandlerServiceServicer):
    def __init__(self, handler: Handler, executor: ThreadPoolExecutor | None, token: _TokenCheck | None) -> None:
        self.handler = handler
        self.executor = executor
        self.tracer = handler_tracer()
        self.token = token

    async def Handle(self, request: handler_pb2.HandleRequest, context: grpc.aio.ServicerContext) -> handler_pb2.HandleResponse:  # type: ignore[override]
        if self.token is not None and not self.token.allows(context.invocation_metadata()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "spool: this handler needs the sidecar's token (app_token_file)")
        m = Message.from_delivery(request.delivery)
        result: object
        with handler_span(m, self.tracer) as span:
            try:
                if self.executor is not None:
                    # The thread runs in this call's context: the handler's span.
                    result = await asyncio.get_running_loop().run_in_executor(self.executor, contextvars.copy_context().run, self.handler, m)
                else:
                    result = self.handler(m)
                    if inspect.isawaitable(result):
                        result = await result
            except Outcome as o:
                result = o
            except Exception as e:
                log.debug("spool: handler failed; the message will be retried: %s", exception_text(e), exc_info=True)
                result = e
            st = settlement_for(result)
            record_outcome(span, st.outcome, st.error)
        if st.outcome == message_pb2.OUTCOME_RELEASE:
            # HandleResponse cannot carry RELEASE; the sidecar reads CANCELLED
            # as "hand it back, no attempt counted" (docs/protocol.md).
            await context.abort(grpc.StatusCode.CANCELLED, "released by the handler")
        return handler_pb2.HandleResponse(
            outcome=st.outcome,  # type: ignore[arg-type]
            retry_after_ms=st.retry_after_ms,
            reason=st.reason,
            error=st.error,
            downstream=st.downstream,
        )


class HandlerServer:
    """A grpc.aio server serving HandlerService with ``handler``.

    ``address`` is where the sidecar's ``app_address`` points (default
    :data:`DEFAULT_HANDLER_ADDRESS`, loopback; ``:port`` is loopback too;
    ``127.0.0.1:0`` picks a free port: read :attr:`port`). ``token``, when
    given, is required of every call (``authorization: Bearer <token>``,
    what spoold sends with ``app_token_file``); other calls are refused
    with UNAUTHENTICATED. ``blocking=True`` runs a plain function in a
    thread pool of ``concurrency`` threads.
    """

    def __init__(
        self,
        handler: Handler,
        address: str = DEFAULT_HANDLER_ADDRESS,
        *,
        token: str | None = None,
        blocking: bool = False,
        concurrency: int = 64,
    ) -> None:
        if not callable(handler):
            raise TypeError("spool: serve_handler: handler is not callable")
        address = _loopback_if_no_host(address)
        check = _TokenCheck(token) if token is not None else None
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="spool-handler") if blocking else None
        self._server = grpc.aio.server()
        handler_pb2_grpc.add_HandlerServiceServicer_to_server(_Servicer(handler, self._executor, check), self._server)
        self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"spool: serve_handler: cannot listen on {address}")
        host = address.rpartition(":")[0]
        self.address = f"{host}:{self.port}" if not address.startswith("unix:") else address
        if check is None and not address.startswith("unix:") and host not in ("127.0.0.1", "localhost", "[::1]"):
            log.warning("spool: the callback server listens on %s without a token: anyone who reaches it can hand it messages", address)

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: float | None = 30.0) -> None:
        """Stops taking calls and waits up to ``grace`` seconds for running ones."""
        await self._server.stop(grace)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def wait(self) -> None:
        await self._server.wait_for_termination()

    async def __aenter__(self) -> HandlerServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()


async def serve_handler(
    handler: Handler,
    address: str = DEFAULT_HANDLER_ADDRESS,
    *,
    token: str | None = None,
    blocking: bool = False,
    concurrency: int = 64,
    grace: float = 30.0,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
) -> None:
    """Serves HandlerService until SIGTERM/SIGINT (or ``stop``), then stops
    taking calls and lets running ones finish (up to ``grace`` seconds)."""
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    installed: list[signal.Signals] = []
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
    server = HandlerServer(handler, address, token=token, blocking=blocking, concurrency=concurrency)
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop(grace)
        for sig in installed:
            loop.remove_signal_handler(sig)
