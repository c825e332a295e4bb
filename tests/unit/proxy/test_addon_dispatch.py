"""proxy.addon_dispatch hands each handler what mitmproxy's own dispatch would."""

from __future__ import annotations

from dataclasses import dataclass

from mitmproxy import hooks
from mitmproxy.proxy.layers.http import HttpRequestHook, HttpResponseHook
from mitmproxy.test import tflow

from faultproxy.proxy.addon_dispatch import event_args


@dataclass
class ReversedHook(hooks.Hook):
    """A hook that reads its own arguments (an addon's own event may)."""

    first: str
    second: str

    def args(self) -> list:
        return [self.second, self.first]


def test_an_events_arguments_are_its_own_args():
    flow = tflow.tflow(resp=True)
    for event in (HttpRequestHook(flow), HttpResponseHook(flow), hooks.UpdateHook([flow]), ReversedHook("a", "b")):
        assert event_args(event) == event.args()
        assert event_args(event) == event.args()  # the second time from the names found the first
    assert event_args(ReversedHook("a", "b")) == ["b", "a"]
