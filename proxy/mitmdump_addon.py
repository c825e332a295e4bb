"""faultproxy as a mitmdump script:

    mitmdump -s proxy/mitmdump_addon.py --set faultproxy_scenario=rate_limit.yaml \
        --set faultproxy_trace_dir=runs/mitmdump/flows --set connection_strategy=lazy
"""

from faultproxy.proxy.attribution import Attribution
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.mcp_http import McpStreams
from faultproxy.proxy.stdio.lane import StdioLane

_attribution, _injector = Attribution(), FaultInjector()
addons = [_attribution, StdioLane(_injector, _attribution.gate), McpStreams(_injector, _attribution.gate), _injector]
