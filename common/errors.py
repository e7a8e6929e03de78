"""Exception types shared by every fabriclab layer."""


class FabriclabError(Exception):
    """Base class of every error fabriclab raises on purpose."""


#: A scenario error's key and message are cut to these lengths: a value quoted whole (a list built
#: from YAML aliases) once made an 80 MB message.
MAX_KEY_CHARS = 160
MAX_MESSAGE_CHARS = 400


def _bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was), on one line."""
    text = " ".join(text.split("\n"))
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class ScenarioError(FabriclabError):
    """A scenario key or value is invalid.

    Attributes:
        key: dotted path of the offending key (for example ``traffic.senders``).
    The command-line front ends turn this into exit code 2.
    """

    def __init__(self, key: str, message: str):
        self.key = _bounded(str(key), MAX_KEY_CHARS)
        self.detail = _bounded(str(message), MAX_MESSAGE_CHARS)
        super().__init__(f"scenario key '{self.key}': {self.detail}")


class SetupError(FabriclabError):
    """Building or configuring the emulated fabric failed (tc, OVS, controller).

    The message carries the underlying tool or kernel error verbatim.
    """


class CapabilityError(FabriclabError):
    """The running kernel lacks something the scenario asked for (exit code 2)."""


class BusyError(SetupError):
    """Another fabriclab run holds the machine's run lock. The command-line front ends turn this
    into exit code 2, before anything is created."""
