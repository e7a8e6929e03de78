"""Exception types shared by every fabriclab layer."""

#: Set to a phase name to raise an exception there, or to ``refused_flow_rule`` to make the
#: controller send one rule every switch refuses (teardown and fidelity tests).
FAULT_ENV = "FABRICLAB_INJECT_FAULT"


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


class RunError(FabriclabError):
    """A run cannot go on: one of its parts failed in a way that leaves its results meaningless
    (a RoCE rate-controller plug-in raised inside an agent). The run loop tears the fabric down
    as for any exception; the command-line front ends print the message and exit 1."""


class BusyError(SetupError):
    """Another fabriclab run holds the machine's run lock. The command-line front ends turn this
    into exit code 2, before anything is created."""


class UnfaithfulRun(FabriclabError):
    """A round's fidelity checks failed: its results are written, marked ``fidelity.ok: false``,
    but the emulation did not do what the numbers claim. The command-line front ends turn this
    into exit code 3 (``--accept-unfaithful`` keeps the exit code 0 and marks every output).

    Attributes:
        failures: ``(round name, failure line)`` pairs, in round order.
        out: the run's results folder.
    """

    def __init__(self, failures: list[tuple[str, str]], out):
        self.failures, self.out = list(failures), out
        first = "; ".join(f"{r}: {f}" for r, f in self.failures[:3])
        more = f" (and {len(self.failures) - 3} more)" if len(self.failures) > 3 else ""
        super().__init__(f"{len(self.failures)} fidelity check(s) failed, results in {out} are not to be "
                         f"trusted: {_bounded(first, MAX_MESSAGE_CHARS)}{more}")


class PathError(FabriclabError):
    """A path the user gave (``--results``, ``--answers``) cannot be used: a file where a folder
    goes, below a file, not writable, under /proc or /sys, a dangling symlink or one another user
    planted. The message names the path, on one line; the command-line front ends turn it into exit
    code 2, before anything is created or started."""
