"""Scenarios, the runner (scenario -> fabric -> controller -> traffic ->
collectors -> results), analysis and plotting."""
