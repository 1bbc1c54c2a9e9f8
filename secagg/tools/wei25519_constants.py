#!/usr/bin/env python3
"""Derives the constants that secagg/src/ed25519_mbedtls.c needs to run Ed25519 on
mbedTLS's short-Weierstrass ECP code, from the defining formulas only.

Chain of curves (all over p = 2^255 - 19):
  edwards25519   -x^2 + y^2 = 1 + d x^2 y^2,  d = -121665/121666      (RFC 8032 5.1)
  curve25519     v^2 = u^3 + A u^2 + u,       A = 486662              (RFC 7748 4.1)
  Wei25519       Y^2 = X^3 + a X + b                                   (lwig curve
                 representations draft): X = u + A/3, Y = v,
                 a = (3 - A^2)/3, b = (2 A^3 - 9 A)/27.
Edwards -> Montgomery is u = (1 + y)/(1 - y), v = c u / x with c = sqrt(-486664)
(RFC 7748 4.1); c is the root that sends the Ed25519 base point to RFC 7748's
(u, v) = (9, 1478...7401), so all three forms name the same base point.

Every constant is checked here (curve equations, [L]G = infinity on Wei25519, the
eight small-order points really have order dividing 8, a round trip through the maps)
before it is printed.

Usage:
  python3 wei25519_constants.py            prints the C block to paste
  python3 wei25519_constants.py --check F  exits 1 unless source file F carries every
                                           printed line verbatim (run by ctest)
"""
import sys

p = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # order of the base point
A_MONT = 486662


def inv(x):
    return pow(x % p, p - 2, p)


def sqrt(x):
    """A square root mod p (p = 5 mod 8), or None if x is not a square."""
    x %= p
    r = pow(x, (p + 3) // 8, p)
    if r * r % p != x:
        r = r * pow(2, (p - 1) // 4, p) % p
    return r if r * r % p == x else None


D = -121665 * inv(121666) % p
SQRT_M1 = pow(2, (p - 1) // 4, p)
assert SQRT_M1 * SQRT_M1 % p == p - 1

# ---- Weierstrass coefficients and the Montgomery shift ----
WEI_A = (3 - A_MONT * A_MONT) * inv(3) % p
WEI_B = (2 * A_MONT**3 - 9 * A_MONT) * inv(27) % p
DELTA = A_MONT * inv(3) % p                   # X = u + A/3


# ---- Edwards arithmetic (complete addition law, a = -1) ----

def ed_add(P, Q):
    x1, y1 = P
    x2, y2 = Q
    t = D * x1 * x2 * y1 * y2 % p
    x3 = (x1 * y2 + y1 * x2) * inv(1 + t) % p
    y3 = (y1 * y2 + x1 * x2) * inv(1 - t) % p
    return (x3, y3)


def ed_mul(k, P):
    R = (0, 1)
    while k:
        if k & 1:
            R = ed_add(R, P)
        P = ed_add(P, P)
        k >>= 1
    return R


def ed_on_curve(P):
    x, y = P
    return (-x * x + y * y - 1 - D * x * x * y * y) % p == 0


def ed_x_from_y(y, sign):
    x = sqrt((y * y - 1) * inv(D * y * y + 1))
    if x is None:
        return None
    if x & 1 != sign:
        x = (p - x) % p
    return x


def ed_encode(P):
    x, y = P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


# ---- Weierstrass arithmetic (affine, None = infinity) ----

def w_add(P, Q):
    if P is None:
        return Q
    if Q is None:
        return P
    (x1, y1), (x2, y2) = P, Q
    if x1 == x2 and (y1 + y2) % p == 0:
        return None
    if P == Q:
        m = (3 * x1 * x1 + WEI_A) * inv(2 * y1) % p
    else:
        m = (y2 - y1) * inv(x2 - x1) % p
    x3 = (m * m - x1 - x2) % p
    return (x3, (m * (x1 - x3) - y1) % p)


def w_mul(k, P):
    R = None
    while k:
        if k & 1:
            R = w_add(R, P)
        P = w_add(P, P)
        k >>= 1
    return R


def w_on_curve(P):
    x, y = P
    return (y * y - (x**3 + WEI_A * x + WEI_B)) % p == 0


# ---- the maps ----

# Ed25519 base point: y = 4/5, x even (RFC 8032 5.1).
BY = 4 * inv(5) % p
BX = ed_x_from_y(BY, 0)
assert ed_on_curve((BX, BY))

# Pick c = sqrt(-486664) so that B maps to RFC 7748's base point (9, v9).
V9 = 14781619447589544791020593568409986887264606134616475288964881837755586237401
c0 = sqrt(-486664)
assert c0 is not None
U_B = (1 + BY) * inv(1 - BY) % p
assert U_B == 9
C = c0 if c0 * U_B * inv(BX) % p == V9 else p - c0
assert C * U_B * inv(BX) % p == V9


def ed_to_wei(P):
    x, y = P
    if (x, y) == (0, 1):
        return None                      # identity <-> infinity
    if (x, y) == (0, p - 1):
        return (DELTA, 0)                # the point of order 2 <-> (u, v) = (0, 0)
    u = (1 + y) * inv(1 - y) % p
    return ((u + DELTA) % p, C * u * inv(x) % p)


def wei_to_ed(P):
    if P is None:
        return (0, 1)
    X, Y = P
    u = (X - DELTA) % p
    if Y == 0:
        return (0, p - 1)
    return (C * u * inv(Y) % p, (u - 1) * inv(u + 1) % p)


G = ed_to_wei((BX, BY))
assert w_on_curve(G)
assert w_mul(L, G) is None, "[L]G must be the point at infinity"
assert w_mul(L - 1, G) is not None
assert wei_to_ed(G) == (BX, BY)
# The maps are a group isomorphism: check on a few multiples.
for k in (2, 3, 7, 12345678901234567890):
    assert ed_to_wei(ed_mul(k, (BX, BY))) == w_mul(k, G), k

# ---- the eight small-order points of edwards25519 ----
# A point of order 8: [L]P for a point P whose 8-torsion part has order 8.
T8 = None
y = 2
while T8 is None:
    x = ed_x_from_y(y, 0)
    if x is not None:
        T = ed_mul(L, (x, y))
        if ed_mul(4, T) != (0, 1):
            T8 = T
    y += 1
SMALL = [ed_mul(i, T8) for i in range(8)]
assert len(set(SMALL)) == 8 and all(ed_mul(8, P) == (0, 1) for P in SMALL)
for P in SMALL:
    assert ed_to_wei(P) is None or w_mul(8, ed_to_wei(P)) is None
# y-coordinates of the small-order points (sign bit ignored), plus the two
# non-canonical encodings y = p and y = p + 1 of y = 0 and y = 1: the list that
# libsodium's ge25519_has_small_order() rejects.
SMALL_Y = sorted({P[1] for P in SMALL}) + [p, p + 1]
assert len(SMALL_Y) == 7


def hexs(v, width=64):
    return "%0*x" % (width, v)


def c_lines():
    out = []
    out.append('#define FL__ED_P_HEX "%s"' % hexs(p))
    out.append('#define FL__ED_L_HEX "%s"' % hexs(L))
    out.append('#define FL__ED_D_HEX "%s"' % hexs(D))
    out.append('#define FL__ED_SQRTM1_HEX "%s"' % hexs(SQRT_M1))
    out.append('#define FL__ED_WEI_A_HEX "%s"' % hexs(WEI_A))
    out.append('#define FL__ED_WEI_B_HEX "%s"' % hexs(WEI_B))
    out.append('#define FL__ED_DELTA_HEX "%s"' % hexs(DELTA))
    out.append('#define FL__ED_C_HEX "%s"' % hexs(C))
    out.append('#define FL__ED_GX_HEX "%s"' % hexs(G[0]))
    out.append('#define FL__ED_GY_HEX "%s"' % hexs(G[1]))
    for i, yv in enumerate(SMALL_Y):
        out.append('#define FL__ED_SMALL_Y%d_HEX "%s"' % (i, hexs(yv)))
    return out


def main():
    lines = c_lines()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            text = f.read()
        missing = [ln for ln in lines if ln not in text]
        for ln in missing:
            print("missing or different: " + ln)
        print("%d of %d constants match" % (len(lines) - len(missing), len(lines)))
        return 1 if missing else 0
    if len(sys.argv) != 1:
        print(__doc__)
        return 2
    print("/* Generated by secagg/tools/wei25519_constants.py; big-endian hex. */")
    for ln in lines:
        print(ln)
    print("/* The eight small-order points of edwards25519, encoded (RFC 8032 5.1.2): */")
    for i, P in enumerate(SMALL):
        print("/*   [%d]T8: %s */" % (i, ed_encode(P).hex()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
