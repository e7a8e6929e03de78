"""A Ctrl-C or SIGTERM that Python drops (raised inside a __del__) still ends the run non-zero."""
import signal

import pytest

from experiments import live as runner


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("sig,exc", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)])
def test_a_swallowed_signal_is_raised_again(sig, exc):
    runner._SIGNALLED.clear()
    runner.SIGNAL_STOP.reset()                # no round kept by an earlier test in this process
    runner.check_signalled()                  # nothing arrived: no exception

    class Finalised:
        def __del__(self):                    # where Python ignores exceptions ("Exception ignored in")
            runner._on_signal(sig, None)
    Finalised()
    with pytest.raises(exc):
        runner.check_signalled()
    runner._SIGNALLED.clear()


def test_a_signal_inside_signals_unwind_unwinds_and_the_old_handler_comes_back():
    before = signal.getsignal(signal.SIGTERM)
    unwound = []
    with pytest.raises(SystemExit) as e:
        with runner.signals_unwind():
            try:
                signal.raise_signal(signal.SIGTERM)
            finally:
                unwound.append(True)
    assert e.value.code == 143 and unwound == [True]
    assert signal.getsignal(signal.SIGTERM) is before
    runner._SIGNALLED.clear()
