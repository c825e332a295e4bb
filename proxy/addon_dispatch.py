"""Calling only the addons that handle an event.

mitmproxy's AddonManager.trigger_event calls every addon of the chain for every event (through
a coroutine and a context manager each), and after every flow event it triggers an `update`
event the same way. With ten addons that is some 80 calls per request of which a handful do
anything: a large part of what a request costs the proxy. `handled_only` keeps the semantics
(each top-level addon's handlers under mitmproxy's own safecall, so an addon's error is logged
and the others still run; AddonHalt stops the event) and skips the addons without a handler,
found once per event name and found again whenever the chain changes. The `update` event that
follows each flow event is not even made when no addon handles it (none of faultproxy's does),
and an event's arguments are read once, not once per handler, by field names found once per
event class (mitmproxy's Hook.args goes through dataclasses.fields every time).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable

from mitmproxy import exceptions, flow, hooks
from mitmproxy.addonmanager import AddonManager, safecall

Handlers = list[list[Callable]]
# event class -> its fields, the handlers' arguments in order (None: the class reads its own)
_ARG_NAMES: dict[type, tuple[str, ...] | None] = {}


def event_args(event: hooks.Hook) -> list:
    """`event.args()`, its fields' names looked up once per event class."""
    kind = type(event)
    if kind not in _ARG_NAMES:
        _ARG_NAMES[kind] = (tuple(field.name for field in dataclasses.fields(event))
                            if kind.args is hooks.Hook.args else None)
    names = _ARG_NAMES[kind]
    return event.args() if names is None else [getattr(event, name) for name in names]


def handled_only(manager: AddonManager) -> None:
    """Make `manager` trigger each event only on the addons (and their children) that handle it."""
    found: dict[str, Handlers] = {}
    seen: list[int] = [len(manager.chain)]

    def handlers(event: hooks.Hook) -> Handlers:
        if seen[0] != len(manager.chain):  # an addon came or went: look again
            found.clear()
            seen[0] = len(manager.chain)
        if event.name not in found:
            per_addon = ([func for _, func in manager._iter_hooks(addon, event)] for addon in manager.chain)
            found[event.name] = [funcs for funcs in per_addon if funcs]
        return found[event.name]

    async def trigger_event(event: hooks.Hook) -> None:
        addons = handlers(event)
        if not addons:
            return
        args = event_args(event)
        for funcs in addons:
            try:
                with safecall():
                    for func in funcs:
                        result = func(*args)
                        if result is not None and inspect.isawaitable(result):
                            await result
            except exceptions.AddonHalt:
                return

    update = hooks.UpdateHook([])  # only its name is looked at

    async def handle_lifecycle(event: hooks.Hook) -> None:
        # AddonManager.handle_lifecycle, with the update event made only for an addon that takes it.
        await trigger_event(event)
        if handlers(update):
            message = event.args()[0]
            if isinstance(message, flow.Flow):
                await trigger_event(hooks.UpdateHook([message]))

    manager.trigger_event = trigger_event  # type: ignore[method-assign]
    manager.handle_lifecycle = handle_lifecycle  # type: ignore[method-assign]
