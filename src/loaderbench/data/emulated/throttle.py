"""The throttle of an emulated tier: `model.concurrency` heads; a read holds one head for access time (unless it
continues that head's last read, or starts a little past its end) plus bytes / bandwidth, real read included."""

from __future__ import annotations

import threading
import time
from collections import deque

from loaderbench.core.devices import DeviceModel

# A read that starts at most this far past the head's last byte needs no positioning: the bytes in between pass
# under the head on the same track (a tar's member headers between two images), at the transfer rate.
SKIP = 64 * 1024


class _Head:
    """One head: the file and contiguous byte range it read last (the drive's track buffer holds that range)."""

    __slots__ = ("busy", "file", "last_used", "next_offset", "start")

    def __init__(self):
        self.busy, self.file, self.start, self.next_offset, self.last_used = False, None, -1, -1, 0.0

    def holds(self, key: str, offset: int) -> bool:
        """A read here needs no positioning: it continues the range just read or rereads part of it (a reader that
        opens a file twice, as OpenCV's imread does to sniff the format, finds the first bytes in the buffer)."""
        return self.file == key and self.start <= offset <= self.next_offset + SKIP


class Throttle:
    """`model.concurrency` heads served first come, first served; a read holds a head for its service time."""

    def __init__(self, model: DeviceModel):
        self.model = model
        self._cond = threading.Condition()
        self._heads = [_Head() for _ in range(model.concurrency)]
        self._queue: deque = deque()
        self.requests = self.bytes = self.seeks = self.overruns = 0
        self.busy_s = self.wait_s = 0.0

    def _acquire(self, key: str, offset: int) -> tuple[_Head, bool]:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while True:
                free = [h for h in self._heads if not h.busy]
                if free and self._queue[0] is ticket:
                    break
                self._cond.wait()
            self._queue.popleft()
            head = next((h for h in free if h.holds(key, offset)), None)
            seek = head is None
            if seek:
                head = min(free, key=lambda h: h.last_used)
            head.busy = True
            if self._queue and len(free) > 1:
                self._cond.notify_all()
            return head, seek

    def _release(
        self, head: _Head, key: str, end: int, nbytes: int, seek: bool, waited: float, held: float, overrun: bool
    ) -> None:
        with self._cond:
            if seek:
                head.start, head.next_offset = end - nbytes, end
            else:
                head.next_offset = max(head.next_offset, end)
            head.busy, head.file, head.last_used = False, key, time.monotonic()
            self.requests += 1
            self.bytes += nbytes
            self.seeks += seek
            self.overruns += overrun
            self.busy_s += held
            self.wait_s += waited
            self._cond.notify_all()

    def read(self, key: str, offset: int, do_read) -> bytes:
        """Run `do_read()` (the real read of `key` at `offset`) on a head; return after the modelled service time."""
        arrived = time.monotonic()
        head, seek = self._acquire(key, offset)
        buffered_to = -1 if seek else head.next_offset  # bytes before this came from the track buffer
        start = time.monotonic()
        data, overrun = b"", False
        try:
            data = do_read()
            # bytes the device delivers: all of a positioned read; past the buffered range otherwise (a skipped gap too)
            fresh = len(data) if seek else max(0, offset + len(data) - buffered_to)
            remaining = start + self.model.service_s(fresh, seek) - time.monotonic()
            overrun = remaining < 0  # the backing read alone took longer than the model allows
            if remaining > 0:
                time.sleep(remaining)
        finally:
            held = time.monotonic() - start
            self._release(head, key, offset + len(data), len(data), seek, start - arrived, held, overrun)
        return data

    def snapshot(self) -> dict:
        with self._cond:
            return {
                "requests": self.requests,
                "bytes": self.bytes,
                "seeks": self.seeks,
                "busy_s": round(self.busy_s, 6),
                "wait_s": round(self.wait_s, 6),
                "overruns": self.overruns,
            }
