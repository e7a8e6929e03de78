"""Exception types shared by every fabriclab layer."""


class FabriclabError(Exception):
    """Base class of every error fabriclab raises on purpose."""


class ScenarioError(FabriclabError):
    """A scenario key or value is invalid.

    Attributes:
        key: dotted path of the offending key (for example ``traffic.senders``).
    The command-line front ends turn this into exit code 2.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        self.detail = message
        super().__init__(f"scenario key '{key}': {message}")


class SetupError(FabriclabError):
    """Building or configuring the emulated fabric failed (tc, OVS, controller).

    The message carries the underlying tool or kernel error verbatim.
    """


class CapabilityError(FabriclabError):
    """The running kernel lacks something the scenario asked for (exit code 2)."""
