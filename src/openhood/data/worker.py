"""The decode worker process and the two fixed-layout messages it exchanges with the pool.

A worker owns one end of a pipe. The pool sends a task (item id, slot, input kind), then the
image bytes or a file path as a second message; the worker decodes, resizes and crops into that slot of the
shared segment and answers with a 28-byte result header (item id, slot, status, shape,
dtype) plus at most 512 bytes of error text. Messages are ``struct``-packed bytes through
``send_bytes``: nothing is pickled, and no array ever crosses the pipe.

Started as ``python -m openhood.data.worker FD SEGMENT SLOT_BYTES MAX_PIXELS SPEC_JSON``; FD is
its end of a socketpair wrapped in ``multiprocessing.connection.Connection`` for framing.

After an image larger than 4K the worker hands its freed memory back to the OS (``malloc_trim``),
so one huge image does not leave a worker holding its pixels until the next one.

One pipe per worker, not a shared ``multiprocessing.Queue``: a queue's reader lock held by a
worker that gets SIGKILLed would hang every other worker, and a private pipe tells the pool
exactly which item the dead worker was holding.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import json
import platform
import signal
import struct
import sys
from multiprocessing.connection import Connection

import numpy as np
from PIL import Image

from openhood.data.image import CorruptImage, ImageSpec, ImageTooLarge, NotAnImage, decode, preprocess
from openhood.data.shm import Segment

TASK = struct.Struct("<QIB")  # item id, slot, input kind; the payload follows as its own message
RESULT = struct.Struct("<QIBIIIcH")  # item id, slot, status, h, w, c, dtype char, error length
BYTES, PATH = 0, 1
OK, NOT_AN_IMAGE, CORRUPT, TOO_LARGE, UNREADABLE, FAILED, READY = range(7)
MAX_ERROR = 512
SCRATCH_PIXELS = 3840 * 2160
STATUS_OF = {NotAnImage: NOT_AN_IMAGE, CorruptImage: CORRUPT, ImageTooLarge: TOO_LARGE}


def run(conn: Connection, segment: str, slot_bytes: int, spec: dict | None, max_pixels: int) -> None:
    """Worker main loop: until the pool closes its end of the pipe (or dies), decode tasks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    seg = Segment.attach(segment)
    slots = np.frombuffer(seg.buf, dtype=np.uint8)
    if spec is not None:
        spec = dict(spec, mean=tuple(spec["mean"]), std=tuple(spec["std"]))
    image_spec = ImageSpec(**spec) if spec is not None else None
    # Model mode: full-size decodes land in one reused buffer (up to 4K; larger allocate).
    scratch = np.empty(SCRATCH_PIXELS * 3, np.uint8) if image_spec is not None else None
    trim = _malloc_trim()
    conn.send_bytes(RESULT.pack(0, 0, READY, 0, 0, 0, b"B", 0))
    while True:
        try:
            msg = conn.recv_bytes()
        except (EOFError, OSError):
            break  # the pool closed the pipe or its process is gone
        item, slot, kind = TASK.unpack_from(msg)
        payload = conn.recv_bytes()  # the image bytes or the path, as a second message
        status, shape, error, data = OK, (0, 0, 0), "", b""
        try:
            if kind == PATH:
                with open(payload, "rb") as f:  # the path as os.fsencode bytes
                    data = f.read()
            else:
                data = payload
            out = slots[slot * slot_bytes : (slot + 1) * slot_bytes]  # this slot, flat uint8
            if image_spec is not None:
                arr = preprocess(data, image_spec, max_pixels=max_pixels, scratch=scratch)  # (crop, crop, 3)
                out[: arr.size] = arr.reshape(-1)
            else:
                # max_pixels is the slot's capacity, so the result always lands in the slot.
                arr = decode(data, max_pixels=max_pixels, out=out)  # (H, W, 3), written in place
            shape = arr.shape
        except tuple(STATUS_OF) as e:
            status, error = STATUS_OF[type(e)], str(e)
        except OSError as e:
            status, error = UNREADABLE, f"cannot read the input file: {e.strerror or e}"
        except Exception as e:  # a decoder bug must fail this item, not the worker
            status, error = FAILED, f"{type(e).__name__}: {e}"
        err = error.encode("utf-8")[:MAX_ERROR]
        conn.send_bytes(RESULT.pack(item, slot, status, *shape, b"B", len(err)) + err)
        if trim is not None and status == OK and _pixels(data) > SCRATCH_PIXELS:
            trim(0)
    seg.close()


def _pixels(data: bytes) -> int:
    """Width × height from the header; 0 when there is none."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.width * img.height
    except Exception:
        return 0


def _malloc_trim():
    """glibc's ``malloc_trim``, or None elsewhere. After a larger-than-4K image the worker gives
    its freed pixel memory back at once: glibc's dynamic mmap threshold keeps Pillow's 16 MB
    blocks in the heap after the first one is freed, and a worker then held ~250 MB after one
    62-Mpx PNG until it decoded another. Only after large images: trimming after every photo
    made a 1080p JPEG 15-40% slower (its buffers are faulted in again)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


if __name__ == "__main__":
    fd, segment, slot_bytes, max_pixels, spec = sys.argv[1:6]
    run(Connection(int(fd)), segment, int(slot_bytes), json.loads(spec), int(max_pixels))
