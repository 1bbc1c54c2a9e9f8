#!/usr/bin/env python3
"""Checks a screenshot of the audit report: a real PNG of the expected size whose pixels
include the colours of the verdict box and of each chart (epsilon line, budget line,
completed and dropped bars, region bars), i.e. the inline SVG was drawn.
Standard library only: a minimal PNG decoder (8-bit RGB/RGBA, non-interlaced)."""
import struct
import sys
import zlib


def decode_png(path):
    data = open(path, 'rb').read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise SystemExit('not a PNG')
    pos, idat, hdr = 8, b'', None
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b'IHDR':
            hdr = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise SystemExit('unsupported PNG layout %r' % (hdr,))
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pr) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = decode_png(sys.argv[1])
    if w < 800 or h < 1000:
        raise SystemExit('screenshot too small: %dx%d' % (w, h))
    want = {
        'verdict ok background': (0xe3, 0xf6, 0xe8),
        'epsilon line': (0x1f, 0x6f, 0xb2),
        'budget line': (0xc0, 0x39, 0x2b),
        'completed bars': (0x2e, 0x8b, 0x57),
        'dropped bars': (0xe6, 0x7e, 0x22),
        'region bars': (0x7d, 0x5b, 0xa6),
    }
    counts = dict.fromkeys(want, 0)
    white = 0
    for row in rows:
        for x in range(0, len(row), bpp):
            px = (row[x], row[x + 1], row[x + 2])
            if px == (255, 255, 255):
                white += 1
                continue
            for name, col in want.items():
                if all(abs(px[k] - col[k]) <= 6 for k in range(3)):
                    counts[name] += 1
    missing = [n for n, c in counts.items() if c < 30]
    print('screenshot %dx%d, %.0f%% white; pixels per element: %s' %
          (w, h, 100.0 * white / (w * h), counts))
    if missing:
        raise SystemExit('not drawn: ' + ', '.join(missing))
    print('audit_render_check: OK')


if __name__ == '__main__':
    main()
