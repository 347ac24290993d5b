"""An aiohttp application served over TLS on an event loop in a thread of its own: how the
operator runs its HTTPS servers (the run API job pods talk to, the Run API kubectl reads)
beside its controllers' threads.

A subclass says what it serves (:meth:`ThreadedServer._application`, called on the
server's own thread, where its event loop is current) and may act before the shutdown
and once the loop has ended.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading

from aiohttp import web

log = logging.getLogger(__name__)


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class ThreadedServer:
    """The server on ``host:port`` (``what`` names it in logs and errors)."""

    what = "server"

    def __init__(self, host: str, port: int, tls: ssl.SSLContext, *, thread_name: str) -> None:
        self._host, self._port, self._tls = host, port, tls
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name=thread_name)
        self._runner: web.AppRunner | None = None

    def start(self, timeout: float = 30.0) -> None:
        """Start serving; raises what kept the server from listening."""
        self._thread.start()
        self._ready.wait(timeout)
        if self._failure is not None:
            raise self._failure
        if not self._ready.is_set():
            raise RuntimeError(f"the {self.what} did not start listening within {timeout:g}s")

    def alive(self) -> bool:
        return self._thread.is_alive() and self._healthy()

    def stop(self, timeout: float) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shut_down(), self._loop)
            self._thread.join(timeout)

    # -- what a subclass says --------------------------------------------------------------

    def _application(self) -> web.Application:
        raise NotImplementedError

    def _healthy(self) -> bool:
        """Whether what the server relies on besides its thread still works."""
        return True

    def _before_shutdown(self) -> None:
        """Called on the loop before requests in flight are let finish."""

    def _after_loop(self) -> None:
        """Called on the server's thread once its loop has stopped."""

    # -- the thread ------------------------------------------------------------------------

    async def _shut_down(self) -> None:
        self._before_shutdown()
        if self._runner is not None:
            await self._runner.cleanup()
        self._loop.stop()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._runner = web.AppRunner(
                self._application(), access_log=None, handle_signals=False, shutdown_timeout=1.0
            )
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self._host, self._port, ssl_context=self._tls)
            self._loop.run_until_complete(site.start())
        except BaseException as error:
            self._failure = error
            self._ready.set()
            return
        log.info("%s listening on https://%s:%s", self.what, self._host, self._port)
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._after_loop()
            self._loop.close()
