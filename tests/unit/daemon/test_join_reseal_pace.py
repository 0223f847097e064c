"""The join's re-seal keeps to ``store_reseal_rate`` (floydd.daemon.app._Pace)."""

import threading
import time

from floydd.daemon.app import _Pace


def test_a_batch_waits_out_its_share_of_time_and_a_stop_cuts_the_wait():
    stop = threading.Event()
    pace = _Pace(10e6, stop)                  # 10 MB a second
    t0 = time.monotonic()
    pace.after(0)                              # where it starts (a resumed run: what the journal holds)
    pace.after(3_000_000)                      # 3 MB done: not before 0.3 s
    assert time.monotonic() - t0 >= 0.3
    threading.Timer(0.2, stop.set).start()
    t1 = time.monotonic()
    pace.after(103_000_000)                   # 10 s more, cut by the stop
    assert 0.2 <= time.monotonic() - t1 < 2.0


def test_rate_zero_never_waits_and_a_new_pass_starts_the_clock_again():
    stop = threading.Event()
    t0 = time.monotonic()
    unpaced = _Pace(0, stop)
    unpaced.after(0)
    unpaced.after(10**12)
    assert time.monotonic() - t0 < 0.5
    pace = _Pace(1e6, stop)
    pace.after(50_000_000)                    # resumed at 50 MB
    t1 = time.monotonic()
    pace.after(0)                              # the journal counted again (objects that vanished)
    pace.after(100_000)                        # 0.1 s from there, not 50 s behind or ahead
    assert 0.1 <= time.monotonic() - t1 < 2.0
