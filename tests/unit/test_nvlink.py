"""The NVLink channel (traffic.nvlink): named pipes between ranks, paced at the NVLink rate."""
import threading
import time

import numpy as np
import pytest

from traffic import nvlink


def test_a_chunk_crosses_whole_at_no_more_than_the_rate(tmp_path):
    rate = 80e6
    a, b = nvlink.Channel(tmp_path / "nv", rate), nvlink.Channel(tmp_path / "nv", rate)
    b.open_reader(0, 1)                  # the reader first, as a rank opens its sources first
    a.open_writer(0, 1, time.time() + 5)
    data = np.arange(250_000, dtype=np.float32)          # 1 MB: 0.1 s at 80 Mbit/s
    got = np.empty_like(data)
    t0 = time.time()
    th = threading.Thread(target=lambda: a.send(1, memoryview(data)))
    th.start()
    b.recv(0, memoryview(got))
    th.join()
    elapsed = time.time() - t0
    assert np.array_equal(got, data)
    # pacing never runs ahead of the rate (by construction); the upper bound only catches a
    # channel that is not there at all, with room for a loaded 2-core machine
    assert elapsed >= 0.98 * 8 * data.nbytes / rate
    assert elapsed < 3 * 8 * data.nbytes / rate
    a.close()
    b.close()
    assert list((tmp_path / "nv").iterdir()) == []      # the reader removed the pipe it made


def test_a_writer_waits_for_its_reader_and_times_out_without_one(tmp_path):
    a = nvlink.Channel(tmp_path, 1e6)
    with pytest.raises(TimeoutError, match="rank 3 never opened"):
        a.open_writer(2, 3, time.time() + 0.1)
    # a reader that opens late is found
    b = nvlink.Channel(tmp_path, 1e6)
    threading.Timer(0.05, lambda: b.open_reader(2, 3)).start()
    a.open_writer(2, 3, time.time() + 5)
    a.close()
    b.close()


def test_bad_rate_is_refused(tmp_path):
    with pytest.raises(ValueError, match="rate_bps"):
        nvlink.Channel(tmp_path, 0)
    with pytest.raises(ValueError, match="rate_bps"):
        nvlink.paced_write(1, memoryview(b"x"), -1)
