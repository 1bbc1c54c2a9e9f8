#!/usr/bin/env python3
"""Derives the X25519 public keys that secagg refuses (secagg/src/x25519_check.c): every
32-byte string that RFC 7748's X25519 decodes to a point of small order, from the curve's
definition only.

Why these and no others. X25519 reads a u-coordinate (bit 255 masked, then taken mod
p = 2^255 - 19), which names a point of curve25519 (v^2 = u^3 + 486662 u^2 + u) or of its
quadratic twist. Curve order: 8 L; twist order: 2 (p + 1) - 8 L = 4 L' (both L and L'
prime, checked below). A clamped scalar is k = 8 m with 2^251 <= m < 2^252, and m < L and
m < L', so [k]P is the point at infinity (the all-zero shared secret) exactly when P lies
in the 8-torsion of the curve or the 4-torsion of the twist. Their u-coordinates are found
here as [L]P for random curve points and [L']P for random twist points (x-only Montgomery
ladder) and checked to be all of them: the 8-torsion of the curve is cyclic (one point of
order 2, two of order 4, four of order 8: 4 distinct u), that of the twist has order 4
(2 distinct u). Together: u = 0, 1, p - 1 and the two u of the points of order 8.

Encodings: every value in [0, 2^255) congruent to one of them mod p, i.e. u and, when it
still fits in 255 bits (u < 19), u + p; bit 255 is masked by X25519 and must be masked by
the check too (so 14 byte strings, 7 after masking).

Every value printed is also checked against an independent RFC 7748 X25519 written here:
the shared secret with random clamped scalars is zero for each encoding, and non-zero for
random keys.

Usage:
  python3 x25519_small_order.py            prints the C table to paste (little-endian)
  python3 x25519_small_order.py --check F  exits 1 unless source file F carries the
                                           printed table verbatim (run by ctest)
"""
import random
import sys

p = 2**255 - 19
A = 486662
A24 = (A - 2) // 4  # RFC 7748: a24 = 121665
L = 2**252 + 27742317777372353535851937790883648493  # prime order of the base point


def is_probable_prime(n, rounds=40):
    if n < 2:
        return False
    for q in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % q == 0:
            return n == q
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    rng = random.Random(n)
    for _ in range(rounds):
        a = rng.randrange(2, n - 1)
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


TWIST_ORDER = 2 * (p + 1) - 8 * L
assert TWIST_ORDER % 4 == 0
L_TWIST = TWIST_ORDER // 4
assert is_probable_prime(L) and is_probable_prime(L_TWIST)
assert L_TWIST % 2 == 1


def is_square(x):
    x %= p
    return x == 0 or pow(x, (p - 1) // 2, p) == 1


def on_curve(u):
    """1 if u is the u-coordinate of a curve point, 0 if of a twist point (u = 0: both)."""
    return is_square(u * u * u + A * u * u + u)


def ladder(k, u):
    """[k](u, *) in projective x-only form (X, Z); Z = 0 is the point at infinity.
    RFC 7748 section 5, without clamping or masking."""
    x1, x2, z2, x3, z3 = u % p, 1, 0, u % p, 1
    swap = 0
    for t in reversed(range(k.bit_length())):
        bit = (k >> t) & 1
        if swap ^ bit:
            x2, x3, z2, z3 = x3, x2, z3, z2
        swap = bit
        a, b = (x2 + z2) % p, (x2 - z2) % p
        aa, bb = a * a % p, b * b % p
        e = (aa - bb) % p
        c, d = (x3 + z3) % p, (x3 - z3) % p
        da, cb = d * a % p, c * b % p
        x3 = (da + cb) * (da + cb) % p
        z3 = x1 * (da - cb) * (da - cb) % p
        x2 = aa * bb % p
        z2 = e * (aa + A24 * e) % p
    if swap:
        x2, z2 = x3, z3
    return x2, z2


def double(X, Z):
    """x-only doubling, valid for every input including u = 0 and infinity."""
    xx, zz, xz = X * X % p, Z * Z % p, X * Z % p
    return (xx - zz) * (xx - zz) % p, 4 * xz * (xx + A * xz + zz) % p


def order_of(u):
    """Order of a point with u-coordinate u if it divides 8, else None."""
    X, Z = u % p, 1
    for i in range(4):
        if Z == 0:
            return 1 << i
        X, Z = double(X, Z)
    return 8 if Z == 0 else None


def affine(X, Z):
    return X * pow(Z, p - 2, p) % p


# ---- the torsion u-coordinates, from random points ----
rng = random.Random(25519)
curve_u, twist_u = set(), set()
for _ in range(200):
    u = rng.randrange(2, p)
    cofactor_free = L if on_curve(u) else L_TWIST
    X, Z = ladder(cofactor_free, u)
    if Z != 0:
        (curve_u if cofactor_free == L else twist_u).add(affine(X, Z))
assert len(curve_u) == 4, curve_u       # orders 2, 4, 8, 8 (the 8-torsion is cyclic)
assert len(twist_u) == 2, twist_u       # orders 2, 4
assert all(on_curve(u) for u in curve_u)
assert all(u == 0 or not on_curve(u) for u in twist_u)
SMALL_U = sorted(curve_u | twist_u)
assert {0, 1, p - 1} <= set(SMALL_U) and len(SMALL_U) == 5
ORDERS = {u: order_of(u) for u in SMALL_U}
assert ORDERS[0] == 2 and ORDERS[1] == 4 and ORDERS[p - 1] == 4
assert sorted(ORDERS.values()) == [2, 4, 4, 8, 8]

# ---- every encoding: u and u + p below 2^255 (bit 255 masked) ----
ENCODED = sorted(v for u in SMALL_U for v in (u, u + p) if v < 2**255)
assert ENCODED == sorted(SMALL_U + [p, p + 1]) and len(ENCODED) == 7


# ---- an independent X25519 (RFC 7748 section 5) ----
def x25519(k_bytes, u_bytes):
    k = bytearray(k_bytes)
    k[0] &= 248
    k[31] &= 127
    k[31] |= 64
    u = int.from_bytes(u_bytes, "little") & ((1 << 255) - 1)
    X, Z = ladder(int.from_bytes(k, "little"), u % p)
    return affine(X, Z).to_bytes(32, "little")  # x2 z2^(p - 2): 0 at infinity


# RFC 7748 section 5.2, first test vector: the X25519 above is the standard one.
_k = bytes.fromhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4")
_u = bytes.fromhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c")
assert x25519(_k, _u).hex() == \
    "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"
for v in ENCODED:
    for top in (0, 1 << 255):
        enc = (v | top).to_bytes(32, "little")
        for _ in range(3):
            assert x25519(rng.randbytes(32), enc) == bytes(32), hex(v | top)
for _ in range(5):
    assert x25519(rng.randbytes(32), x25519(rng.randbytes(32), (9).to_bytes(32, "little"))) \
        != bytes(32)


def name(v):
    """Comment text of a table row."""
    if v not in ORDERS:
        return "u = p%s: non-canonical %d" % (" + %d" % (v - p) if v > p else "", v - p)
    where = "curve and twist" if v == 0 else ("curve" if on_curve(v) else "twist")
    u = {0: "0", 1: "1", p - 1: "p - 1"}.get(v)
    if u is None:
        return "a point of order %d (%s)" % (ORDERS[v], where)
    return "u = %s: order %d (%s)" % (u, ORDERS[v], where)


def c_lines():
    """The table rows: a comment line and four lines of 8 little-endian bytes each."""
    out = []
    for v in ENCODED:
        b = v.to_bytes(32, "little")
        rows = [", ".join("0x%02x" % x for x in b[i:i + 8]) for i in range(0, 32, 8)]
        out.append("    /* %s */" % name(v))
        out.append("    {%s," % rows[0])
        out.append("     %s," % rows[1])
        out.append("     %s," % rows[2])
        out.append("     %s}," % rows[3])
    return out


def main():
    lines = c_lines()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            text = f.read()
        if "\n".join(lines) + "\n" in text:
            print("the table (%d rows, %d lines) matches" % (len(ENCODED), len(lines)))
            return 0
        for ln in lines:
            if ln not in text:
                print("missing or different: " + ln)
        print("the table is not in %s verbatim, in this order" % sys.argv[2])
        return 1
    if len(sys.argv) != 1:
        print(__doc__)
        return 2
    print("/* Generated by secagg/tools/x25519_small_order.py (little-endian, bit 255 clear). */")
    for ln in lines:
        print(ln)
    return 0


if __name__ == "__main__":
    sys.exit(main())
