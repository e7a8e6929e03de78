"""A Ctrl-C or SIGTERM that Python drops (raised inside a __del__) still ends the run non-zero."""
import signal

import pytest

from experiments import runner


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("sig,exc", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)])
def test_a_swallowed_signal_is_raised_again(sig, exc):
    runner._SIGNALLED.clear()
    runner.check_signalled()                  # nothing arrived: no exception

    class Finalised:
        def __del__(self):                    # where Python ignores exceptions ("Exception ignored in")
            runner._on_signal(sig, None)
    Finalised()
    with pytest.raises(exc):
        runner.check_signalled()
    runner._SIGNALLED.clear()
