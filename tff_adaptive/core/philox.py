"""TF's stateless uniform floats in NumPy: `tf.random.stateless_uniform` of many seeds at once.

`tf.random.stateless_uniform(shape, seed, dtype=tf.float32)` on the CPU (TF 2.14, Philox, the
algorithm 'auto_select' picks there) draws its numbers with the counter-based generator
Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"):

  key, counter from the seed (s0, s1):  m = Philox((lo s0, hi s0, lo s1, hi s1), K_0);
                                        key = (m_0, m_1), counter_j = (j, 0, m_2, m_3)
  the i-th number:                      w = Philox(counter_{i div 4}, key)_{i mod 4};
                                        u_i = float(0x3f800000 | (w & 0x7fffff)) - 1

one Philox call being 10 rounds of (c_0, c_1, c_2, c_3) <- (hi(B c_2) ^ c_1 ^ k_0, lo(B c_2),
hi(A c_0) ^ c_3 ^ k_1, lo(A c_0)) with the key raised by (W_A, W_B) between rounds. So u_i is
a float in [0, 1) with 23 random mantissa bits, exactly `mantissa_i / 2^23`.

Here the same arithmetic runs in NumPy over arrays of seeds, so that a round's clients' shuffles
(`seeds.epoch_rows`) cost a few vectorised operations on the host instead of one TF op per
client. `tests/core/test_philox.py` holds it bit-equal to TF's kernel.
"""

import numpy as np

_MASK32 = np.uint64(0xFFFFFFFF)
_M_A, _M_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Philox4x32 multipliers
_W_A, _W_B = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)  # key increments (Weyl)
# TF's fixed key that scrambles a user seed into (key, counter) (`GenerateKey`).
_SEED_KEY = (np.uint32(0x3EC8F720), np.uint32(0x02461E29))


def philox4x32(counter, key):
  """Philox4x32-10 of counters (4 uint32 arrays) under keys (2 uint32 arrays); broadcasts."""
  c0, c1, c2, c3 = (np.asarray(c, np.uint32) for c in counter)
  k0, k1 = (np.asarray(k, np.uint32) for k in key)
  with np.errstate(over='ignore'):
    for r in range(10):
      p0 = _M_A * c0.astype(np.uint64)
      p1 = _M_B * c2.astype(np.uint64)
      hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & _MASK32).astype(np.uint32)
      hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & _MASK32).astype(np.uint32)
      c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
      if r < 9:
        k0, k1 = k0 + _W_A, k1 + _W_B
  return c0, c1, c2, c3


def key_and_counter(seeds: np.ndarray):
  """TF's (key, counter words 2 and 3) of int64 seeds [..., 2]."""
  s = np.asarray(seeds, np.int64).astype(np.uint64)
  s0, s1 = s[..., 0], s[..., 1]
  m = philox4x32(
    ((s0 & _MASK32), (s0 >> np.uint64(32)), (s1 & _MASK32), (s1 >> np.uint64(32))), _SEED_KEY
  )
  return (m[0], m[1]), (m[2], m[3])


def mantissas(seeds: np.ndarray, sizes: np.ndarray) -> np.ndarray:
  """The 23 mantissa bits (uint32) of `stateless_uniform([n_i], seed=seeds[i])` for every i,
  concatenated ([sum n_i]); the floats TF draws are `mantissa / 2**23`.

  Args:
    seeds: int64 [C, 2].
    sizes: [C] non-negative counts n_i.
  """
  sizes = np.asarray(sizes, np.int64)
  groups = (sizes + 3) // 4  # one Philox call gives 4 numbers
  owner = np.repeat(np.arange(len(sizes)), groups)
  first = np.concatenate([[0], np.cumsum(groups)[:-1]]).astype(np.int64)
  (k0, k1), (m2, m3) = key_and_counter(np.asarray(seeds, np.int64).reshape(-1, 2))
  j = (np.arange(len(owner)) - first[owner]).astype(np.uint32)
  words = philox4x32((j, np.zeros_like(j), m2[owner], m3[owner]), (k0[owner], k1[owner]))
  flat = np.stack(words, axis=1).reshape(-1)  # client i's numbers from 4 * first[i] on
  client = np.repeat(np.arange(len(sizes)), sizes)
  starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
  local = np.arange(len(client)) - starts[client]
  return flat[4 * first[client] + local] & np.uint32(0x7FFFFF)


def uniform(seed, n: int) -> np.ndarray:
  """`tf.random.stateless_uniform([n], seed=seed, dtype=tf.float32)`, in NumPy."""
  bits = mantissas(np.asarray(seed, np.int64).reshape(1, 2), [n])
  return (bits.astype(np.float64) / 2.0**23).astype(np.float32)
