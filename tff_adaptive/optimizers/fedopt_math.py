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
  g2 = tf.square(g)
  return v_prev - (1.0 - beta_2) * g2 * tf.sign(v_prev - g2)


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
