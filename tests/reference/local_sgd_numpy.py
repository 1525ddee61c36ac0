"""Float64 NumPy reference of FedOpt's client update and example-weighted averaging.

Reddi et al. 2021, Algorithm 5: client i runs E epochs of minibatch SGD (heavy-ball momentum
u = mu u + grad; w -= lr u, the TF/Keras form) from x_t over its n_i examples and returns
g_i = x_t - x_i; the server averages g_t = sum_i n_i g_i / sum_i n_i.

The model is multinomial logistic regression, logits = x W + b, with the mean cross-entropy
of a minibatch as loss, whose gradient is (derivation: d/dz CE(softmax(z), y) = p - onehot(y),
then the chain rule through z = x W + b and the 1/|batch| of the mean):
  dW = x^T (p - Y) / |batch|,  db = sum_rows(p - Y) / |batch|.
The per-epoch example orders are inputs (the shuffle is not part of the equations).
"""

import numpy as np


def softmax(z: np.ndarray) -> np.ndarray:
  z = z - z.max(axis=1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=1, keepdims=True)


def cross_entropy_and_grads(w, b, x, y):
  """Mean CE over the batch and its gradients with respect to (w, b)."""
  p = softmax(x @ w + b)
  onehot = np.eye(w.shape[1])[y]
  loss = -np.mean(np.log(p[np.arange(len(y)), y]))
  r = (p - onehot) / len(y)
  return loss, x.T @ r, r.sum(axis=0)


def local_sgd(w0, b0, x, y, perms, batch_size, lr, momentum=0.0):
  """E = len(perms) epochs of minibatch SGD(M); returns (w, b, mean batch loss)."""
  w, b = w0.astype(np.float64).copy(), b0.astype(np.float64).copy()
  uw, ub = np.zeros_like(w), np.zeros_like(b)
  losses = []
  for perm in perms:
    for start in range(0, len(perm), batch_size):
      idx = perm[start : start + batch_size]
      loss, gw, gb = cross_entropy_and_grads(w, b, x[idx], y[idx])
      losses.append((loss, len(idx)))
      if momentum:
        uw, ub = momentum * uw + gw, momentum * ub + gb
        gw, gb = uw, ub
      w, b = w - lr * gw, b - lr * gb
  mean_loss = sum(l * n for l, n in losses) / sum(n for _, n in losses)
  return w, b, mean_loss


def weighted_average(updates, weights):
  """sum_i n_i u_i / sum_i n_i, per array of the update lists."""
  total = float(sum(weights))
  return [sum(n * u[j] for u, n in zip(updates, weights)) / total for j in range(len(updates[0]))]
