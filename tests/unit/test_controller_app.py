"""The controller app's event registrations (no switch needed)."""
from controller.app import FabricController
from controller.ofp import CONFIG_DISPATCHER, MAIN_DISPATCHER, ofp_event


def test_setup_barrier_reply_is_heard_before_the_connection_reaches_main():
    """os-ken runs apps on native threads: the app's set-up barrier can overtake os-ken's own
    port-description request, so its reply may arrive while the connection is still in CONFIG.
    A handler registered for MAIN only never hears it and the run waits until its timeout
    (seen in the VM lane: 'all connected, configuration incomplete')."""
    dispatchers = FabricController.on_barrier.callers[ofp_event.EventOFPBarrierReply].dispatchers
    assert CONFIG_DISPATCHER in dispatchers and MAIN_DISPATCHER in dispatchers
