#!/usr/bin/env python3
"""Writes crypto_profiles.txt: the known answers that the client SDK's two crypto profiles
(libsodium in libflotilla-client-sdk.so, mbedTLS alone in libflotilla_client_embedded.so)
must both reproduce, so that a server and its devices agree on rotation signs and on every
seeded dp stream whichever profile each runs.

Published vectors (RFC 8439 appendix A.1, FIPS 180-2 appendix B, RFC 4648 section 10) are
transcribed below and re-checked against the Python `cryptography` package and `hashlib`
(independent implementations) before they are written. Records named `generated-*` are
computed here from `cryptography`'s ChaCha20 with the exact byte layout of dp's code:
  - dp_rng: fl_dp_rng_create_chacha20(seed) refill i is the ChaCha20-IETF keystream of
    (seed, nonce = u64le(i) || 00000000) from block 0, 4096 bytes; fl_dp_rng_bytes hands
    the bytes out in order and then skips to the next multiple of 8 within the buffer;
  - rotation: the sign of coordinate i is bit (i mod 8) of byte i/8 of the keystream of
    (seed, nonce = 00 x 11 || 80) from block 0 (set = negated).

Usage: python3 gen_profile_vectors.py [outdir]   (deterministic: a rerun leaves `git diff`
empty). Format (read by tests/client-sdk/test_crypto_profiles.c): records of `key = value`
lines separated by blank lines, `#` comments; values hex (base64 `text` too, so that
spaces and line breaks survive) unless the key is name, alg, n, block, chunk, len or result.
"""
import base64
import hashlib
import os
import random
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

H = bytes.fromhex
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
BUF = 4096  # FL_DP_RNG_BUFFER_BYTES


def keystream(key, nonce, block, n):
    # cryptography's ChaCha20 takes a 16-byte nonce: 32-bit little-endian counter || nonce.
    full = block.to_bytes(4, "little") + nonce
    enc = Cipher(algorithms.ChaCha20(key, full), mode=None).encryptor()
    return enc.update(bytes(n))


records = []


def rec(**kv):
    records.append(kv)


# ---- ChaCha20 block function, RFC 8439 appendix A.1 (test vectors 1-5) ----
RFC_A1 = [
    ("rfc8439-A.1-test1", "00" * 32, "00" * 12, 0,
     "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
     "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"),
    ("rfc8439-A.1-test2", "00" * 32, "00" * 12, 1,
     "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
     "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f"),
    ("rfc8439-A.1-test3", "00" * 31 + "01", "00" * 12, 1,
     "3aeb5224ecf849929b9d828db1ced4dd832025e8018b8160b82284f3c949aa5a"
     "8eca00bbb4a73bdad192b5c42f73f2fd4e273644c8b36125a64addeb006c13a0"),
    ("rfc8439-A.1-test4", "00ff" + "00" * 30, "00" * 12, 2,
     "72d54dfbf12ec44b362692df94137f328fea8da73990265ec1bbbea1ae9af0ca"
     "13b25aa26cb4a648cb9b9d1be65b2c0924a66c54d545ec1b7374f4872e99f096"),
    ("rfc8439-A.1-test5", "00" * 32, "00" * 11 + "02", 0,
     "c2c64d378cd536374ae204b9ef933fcd1a8b2288b3dfa49672ab765b54ee27c7"
     "8a970e0e955c14f3a88e741b97c286f75f8fc299e8148362fa198a39531bed6d"),
]
for name, key, nonce, block, out in RFC_A1:
    assert keystream(H(key), H(nonce), block, 64) == H(out), name
    rec(alg="chacha20", name=name, key=key, nonce=nonce, block=block, out=out)

rnd = random.Random(8439)
key = bytes(rnd.randrange(256) for _ in range(32))
nonce = bytes(rnd.randrange(256) for _ in range(12))
for block, n in ((0, 1), (7, 1000), (65, 4096 + 13)):
    rec(alg="chacha20", name="generated-%d-%d" % (block, n), key=key.hex(), nonce=nonce.hex(),
        block=block, out=keystream(key, nonce, block, n).hex())

# ---- SHA-256, FIPS 180-2 appendix B and the empty string ----
SHA = [
    ("fips180-2-B.1", b"abc".hex(),
     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ("fips180-2-B.2", b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".hex(),
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ("empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
]
for name, msg, out in SHA:
    assert hashlib.sha256(H(msg)).hexdigest() == out, name
    rec(alg="sha256", name=name, msg=msg, out=out)

# ---- strict base64 (the signature header): RFC 4648 section 10, then refusals ----
for s in (b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"):
    rec(alg="base64", name="rfc4648-10-" + s.decode(), n=len(s),
        text=base64.b64encode(s).hex(), result="ok", out=s.hex())
sig = bytes(rnd.randrange(256) for _ in range(64))
good = base64.b64encode(sig).decode()
rec(alg="base64", name="generated-64", n=64, text=good.encode().hex(), result="ok",
    out=sig.hex())
bad = [
    ("nonzero-unused-bits", 1, "Zh=="),          # 'h' leaves bits set after 'f'
    ("nonzero-unused-bits-2", 2, "Zm9="),         # "Zm8=" is canonical
    ("three-bytes-for-two", 2, "Zm9x"),
    ("missing-padding", 1, "Zg"),
    ("one-pad-short", 1, "Zg="),
    ("pad-in-middle", 2, "Z=9v"),
    ("bad-char", 3, "Zm9!"),
    ("space", 3, "Zm9 "),
    ("line-break", 3, "Zm\n9"),
    ("crlf", 6, "Zm9v\r\nYm"),
    ("wrong-length-for-n", 2, "Zm9v"),
    ("url-alphabet", 3, "-_-_"),
    ("sig-trailing-space", 64, good[:-1] + " "),
    ("sig-one-char-short", 64, good[:-1]),
]
for name, n, text in bad:
    assert len(text) == 4 * ((n + 2) // 3) or name.startswith(("missing", "one-pad", "sig-one"))
    rec(alg="base64", name="generated-refuse-" + name, n=n, text=text.encode().hex(),
        result="fail")

# ---- dp's seeded rng and rotation signs (generated-*) ----
seed = bytes(rnd.randrange(256) for _ in range(32))


def dp_rng_reads(seed, total, chunk):
    out, buf, pos, refills = bytearray(), b"", BUF, 0
    left = total
    while left > 0:
        n = min(chunk, left)
        left -= n
        while n > 0:
            if pos >= BUF:
                buf = keystream(seed, refills.to_bytes(8, "little") + bytes(4), 0, BUF)
                refills += 1
                pos = 0
            k = min(n, BUF - pos)
            out += buf[pos:pos + k]
            pos += k
            n -= k
        pos = (pos + 7) & ~7
    return bytes(out)


for total, chunk in ((9000, 9000), (5000, 13)):
    rec(alg="dp_rng", name="generated-%d-by-%d" % (total, chunk), seed=seed.hex(), len=total,
        chunk=chunk, out_sha256=hashlib.sha256(dp_rng_reads(seed, total, chunk)).hexdigest())

n = 16384  # a power of 4: the transform of sqrt(n) e_0 is exactly all ones
rec(alg="rotation", name="generated-signs-%d" % n, seed=seed.hex(), n=n,
    signs=keystream(seed, bytes(11) + b"\x80", 0, n // 8).hex())

with open(os.path.join(OUT, "crypto_profiles.txt"), "w") as f:
    f.write("# Generated by tests/vectors/client-sdk/gen_profile_vectors.py -- do not edit by "
            "hand.\n# Both crypto profiles of the client SDK must reproduce every record "
            "(see the script).\n")
    for r in records:
        f.write("\n")
        for k, v in r.items():
            f.write("%s = %s\n" % (k, v))
