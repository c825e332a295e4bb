"""The runner: scenario x tasks x variants x grid -> episodes, each an agent behind the proxy."""
