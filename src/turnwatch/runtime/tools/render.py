"""The GenerateImages worker process: renders a PNG (a gradient seeded by the prompt).

Run as ``python -m turnwatch.runtime.tools.render OUT SIZE STEPS PROMPT``. Each step refines the
image and prints a progress line, like a diffusion sampler; the PNG is written atomically at the
end, so a stopped render leaves no half file.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import time
import zlib


def png(width: int, height: int, pixel: bytes) -> bytes:
    """A valid RGB PNG of the given size filled by a gradient tinted with ``pixel``."""
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width):
            rows += bytes(
                (
                    (pixel[0] + x * 255 // max(width, 1)) % 256,
                    (pixel[1] + y * 255 // max(height, 1)) % 256,
                    pixel[2],
                )
            )

    def chunk(tag: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + tag
            + body
            + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(rows)))
        + chunk(b"IEND", b"")
    )


def main(argv: list[str]) -> int:
    out, size, steps, prompt = argv[0], int(argv[1]), int(argv[2]), " ".join(argv[3:])
    seed = hashlib.sha256(prompt.encode()).digest()[:3]
    for step in range(1, steps + 1):
        time.sleep(0.05)  # one sampler step
        print(f"step {step}/{steps}", flush=True)
    tmp = f"{out}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(png(size, size, seed))
    os.replace(tmp, out)
    print(f"wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
