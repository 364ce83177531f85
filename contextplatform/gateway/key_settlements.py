"""A key's budget settled once its call is over, the calls of every request together (group
commit): a call hands its settlement (``key_budgets.settle_key``'s reservation, tokens and
dollars, and its tokens-a-minute hold) to this process's settling thread and waits until it is
committed, as it waited for its own statement before; the thread writes whatever has queued
meanwhile, each key's settlements added up into one statement (``key_budgets.settle_keys``).

Its own trip to the request's thread, with a connection taken from the pool and given back, cost
a call more CPU than the rest of its budget's work; under load, one statement now settles the
calls that finished while the one before it ran. Nothing lingers: a lone call is written at
once. The promise is the budget's as before: a reservation is held until its settlement is
committed, and the answer goes to the client after that; a settlement that fails is logged and
leaves the reservation held (the key may get less than its budget, never more). A caller that
is cancelled while it waits does not cancel its settlement."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db import close_old_connections, connection

from contextplatform.core.batches import take_batch
from contextplatform.gateway.key_budgets import KeyReservation, settle_keys
from tenants.key_rates import TokenHold, settle_tokens
from tenants.models import Tenant

BATCH_SIZE = 256


@dataclass
class Settlement:
    tenant: Tenant
    reservation: KeyReservation
    tokens: int
    usd: Decimal
    hold: TokenHold | None  # the call's tokens a minute, settled with it (to ``tokens``)
    done: asyncio.Future[None]


class KeySettler:
    def __init__(self) -> None:
        self._queue: queue.Queue[Settlement] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    async def settle(
        self,
        tenant: Tenant,
        reservation: KeyReservation,
        tokens: int,
        usd: Decimal,
        hold: TokenHold | None = None,
    ) -> None:
        """Settle the call's reservation to ``tokens`` and ``usd`` (and its minute's ``hold``):
        returns once committed; raises what the statement raised."""
        done = asyncio.get_running_loop().create_future()
        self._ensure_thread()
        self._queue.put(Settlement(tenant, reservation, tokens, usd, hold, done))
        await asyncio.shield(done)  # a cancelled caller leaves its settlement to finish

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._start_lock:  # a forked worker finds its parent's thread gone: its own starts
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="key-settler", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch = take_batch(self._queue, BATCH_SIZE, 0.0)  # what queued while the last ran
            outcomes: list[tuple[Settlement, BaseException | None]] = []
            try:
                close_old_connections()
                # The keys' spend lives in the public schema, on every tenant's search path: the
                # calls' tenant's is the one a connection of the pool most likely has set already
                # (no SET search_path before the statements, nor after them for the next user).
                connection.set_tenant(batch[-1].tenant)
                outcomes = self._write(batch)
            except Exception as error:  # the connection itself: every caller is told
                connection.close()
                outcomes = [(settlement, error) for settlement in batch]
            finally:
                _resolve(outcomes)
                if self._queue.empty():
                    connection.close()  # idle: back to the pool (or closed), not held open

    @staticmethod
    def _write(batch: list[Settlement]) -> list[tuple[Settlement, BaseException | None]]:
        by_key: dict[tuple[int, date], list[Settlement]] = defaultdict(list)
        for settlement in batch:
            if settlement.hold is not None:  # never raises
                settle_tokens(settlement.hold, settlement.tokens)
            ask = settlement.reservation.ask
            by_key[(ask.key_id, ask.period)].append(settlement)
        outcomes: list[tuple[Settlement, BaseException | None]] = []
        for _, settlements in sorted(by_key.items(), key=lambda item: item[0]):
            error: BaseException | None = None
            try:
                settle_keys([(s.reservation, s.tokens, s.usd) for s in settlements])
            except Exception as failed:
                error = failed
                connection.close()  # a broken connection is replaced on next use
            outcomes.extend((settlement, error) for settlement in settlements)
        return outcomes


def _resolve(outcomes: list[tuple[Settlement, BaseException | None]]) -> None:
    """Each waiting call told, on its own event loop: one wake-up of each loop per batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Settlement, BaseException | None]]] = (
        defaultdict(list)
    )
    for settlement, error in outcomes:
        by_loop[settlement.done.get_loop()].append((settlement, error))
    for loop, told in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(_told, told)


def _told(outcomes: list[tuple[Settlement, BaseException | None]]) -> None:
    for settlement, error in outcomes:
        if settlement.done.done():
            continue
        if error is None:
            settlement.done.set_result(None)
        else:
            settlement.done.set_exception(error)


SETTLER = KeySettler()


__all__ = ["SETTLER", "KeySettler", "Settlement"]
