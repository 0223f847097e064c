"""Bytes sent or fetched as tar over FLOYD_HOST are reported to the progress bar as they move."""

from __future__ import annotations

import io
import tempfile

from floydd.client import _Counted


def test_a_file_body_reports_every_block_and_ends_at_its_length():
    seen = []
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 20_000)
        f.seek(5_000)                                  # what is left to send is what counts
        body = _Counted.file(f, lambda done, total: seen.append((done, total)))
        assert body.total == 15_000
        while body.read(8192):
            pass
    assert seen[-1] == (15_000, 15_000) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_a_response_of_unknown_length_still_counts_without_a_callback_or_total():
    plain = _Counted(io.BytesIO(b"abc"), None, None)
    assert plain.read() == b"abc" and plain.done == 3
