"""The server update rules of adaptive federated optimization, as pure TF functions.

Reddi, Charles, Zaheer, Garrett, Rush, Konecny, Kumar, McMahan. "Adaptive Federated
Optimization." ICLR 2021, Algorithm 2 (and its batched form, Algorithm 5).

Notation. The paper writes the averaged client change as Delta_t = mean_i(x_i - x_t) and
updates x_{t+1} = x_t + eta * m_t / (sqrt(v_t) + tau). This library passes the server the
pseudo-gradient g_t = -Delta_t (initial weights minus trained weights, the sign TFF uses for
client updates), so every rule below is the paper's rule with Delta_t = -g_t:

  m_t = beta_1 * m_{t-1} + (1 - beta_1) * g_t                      (first moment)
  v_t = v_{t-1} + g_t^2                                            (FedAdagrad)
  v_t = v_{t-1} - (1 - beta_2) * g_t^2 * sign(v_{t-1} - g_t^2)     (FedYogi)
  v_t = beta_2 * v_{t-1} + (1 - beta_2) * g_t^2                    (FedAdam)
  x_{t+1} = x_t - eta_t * m_t / (sqrt(v_t) + tau)                  (server step)

The second moments only see g_t^2, so they are identical under either sign. eta_t is eta for
Algorithm 2 as printed, and the Keras-style bias-corrected rate
eta * sqrt(1 - beta_2^t) / (1 - beta_1^t) (t counted from 1) for the variant the authors' code
used to produce the published tables.

The Yogi line is the rule of Zaheer et al. 2018 on the squared pseudo-gradient; Algorithm 2's
printed line 12 drops the square on the first Delta_t, a typo confirmed by the authors.
"""

import tensorflow as tf


def first_moment(m_prev: tf.Tensor, g: tf.Tensor, beta_1: tf.Tensor) -> tf.Tensor:
  """m_t = beta_1 * m_{t-1} + (1 - beta_1) * g_t (Algorithm 2, line 10)."""
  return beta_1 * m_prev + (1.0 - beta_1) * g


def adagrad_second_moment(v_prev: tf.Tensor, g: tf.Tensor) -> tf.Tensor:
  """v_t = v_{t-1} + g_t^2 (Algorithm 2, line 11, FedAdagrad)."""
  return v_prev + tf.square(g)


def adam_second_moment(v_prev: tf.Tensor, g: tf.Tensor, beta_2: tf.Tensor) -> tf.Tensor:
  """v_t = beta_2 * v_{t-1} + (1 - beta_2) * g_t^2 (Algorithm 2, line 13, FedAdam)."""
  return beta_2 * v_prev + (1.0 - beta_2) * tf.square(g)


def yogi_second_moment(v_prev: tf.Tensor, g: tf.Tensor, beta_2: tf.Tensor) -> tf.Tensor:
  """v_t = v_{t-1} - (1 - beta_2) * g_t^2 * sign(v_{t-1} - g_t^2) (FedYogi)."""
  return yogi_second_moment_of_square(v_prev, tf.square(g), beta_2)


def yogi_second_moment_of_square(v_prev: tf.Tensor, g2: tf.Tensor, beta_2: tf.Tensor) -> tf.Tensor:
  """FedYogi's v_t from g_t^2, or from an estimate s_t of it that may be negative.

  Yogi moves v towards g^2 by (1 - beta_2) g^2: v - (1 - beta_2) |s| sign(v - s), which is the
  rule itself for s = g^2 >= 0; with |s| a negative estimate also moves v towards it (down),
  where s sign(v - s) would move v up.
  """
  return v_prev - (1.0 - beta_2) * tf.abs(g2) * tf.sign(v_prev - g2)


# Each rule reads g_t only through g_t^2: the rules of an estimate s_t of g_t^2.
SECOND_MOMENTS_OF_SQUARE = {
  'adagrad': lambda v, g2, beta_2: v + g2,
  'adam': lambda v, g2, beta_2: beta_2 * v + (1.0 - beta_2) * g2,
  'yogi': yogi_second_moment_of_square,
}


def noise_aware_second_moment(
  rule: str, v_prev: tf.Tensor, g: tf.Tensor, beta_2: tf.Tensor, noise_variance: tf.Tensor
) -> tf.Tensor:
  """v_t of `rule` ('adagrad', 'adam', 'yogi') with DP noise of known variance removed.

  Under user-level DP the server receives g~_t = g_t + n_t, n_t ~ N(0, sigma^2 I) independent
  of g_t, so E[g~_t^2] = g_t^2 + sigma^2 per coordinate: the noise inflates v_t by about
  sigma^2 everywhere and flattens the preconditioner towards SGD's. s_t = g~_t^2 - sigma^2 is
  an unbiased estimate of g_t^2, and every rule reads g only through g^2, so

    v_t = max(rule(v_{t-1}, s_t), 0)        (FedAdam: beta_2 v_{t-1} + (1 - beta_2) s_t)

  clamped at 0 because an estimate can go negative and v_t enters a square root. With
  sigma^2 = 0 it is `rule` exactly. Correcting the second moment for the known noise variance
  is the idea of DP-FedAdamW (arXiv 2602.19945; Li et al., ICLR 2023, delay the preconditioner
  instead); the rule above is this library's, stated in full here and tested against NumPy.
  """
  g2 = tf.square(g) - noise_variance
  return tf.maximum(SECOND_MOMENTS_OF_SQUARE[rule](v_prev, g2, beta_2), 0.0)


def bias_corrected_learning_rate(
  eta: tf.Tensor, beta_1: tf.Tensor, beta_2: tf.Tensor, t: tf.Tensor
) -> tf.Tensor:
  """eta_t = eta * sqrt(1 - beta_2^t) / (1 - beta_1^t), t = 1, 2, ... (Kingma & Ba 2015).

  This is the Keras Adam form the authors' code used: the two bias corrections of Adam
  folded into the step size, with tau added to the uncorrected sqrt(v_t).
  """
  return eta * tf.sqrt(1.0 - tf.pow(beta_2, t)) / (1.0 - tf.pow(beta_1, t))


def adaptive_step(
  x: tf.Tensor, m: tf.Tensor, v: tf.Tensor, eta: tf.Tensor, tau: tf.Tensor
) -> tf.Tensor:
  """x_{t+1} = x_t - eta * m_t / (sqrt(v_t) + tau) (Algorithm 2, line 14; tau outside sqrt)."""
  return x - eta * m / (tf.sqrt(v) + tau)
