"""Dev cluster children die with their supervisor, even when it is SIGKILLed.

Linux only: `prctl(PR_SET_PDEATHSIG, SIGKILL)` at the child's start-up (not in a
`preexec_fn` between fork and exec, which is unsafe in a process with threads,
like the supervisor with its gRPC probes). The supervisor passes its pid in
`ENV_PARENT`; a child whose parent already changed (the supervisor died before
the prctl) exits at once. Elsewhere this is a no-op (the children then outlive a
SIGKILLed supervisor; `metakraft dev` reports them at the next start).

The signal is sent when the thread that forked the child exits, so the supervisor
starts its children from its main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

ENV_PARENT = "METAKRAFT_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Call first thing in a child: SIGKILL this process when its parent dies."""
    expected = os.environ.pop(ENV_PARENT, None)
    if expected is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return  # not fatal: the child just outlives a killed supervisor
    if str(os.getppid()) != expected:
        os._exit(1)  # the supervisor died before the prctl took effect
