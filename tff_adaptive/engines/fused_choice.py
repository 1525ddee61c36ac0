"""Whether an engine runs a round's local steps as one XLA computation (`fused_loop`), and the
in-process and vectorised engines built accordingly.

`--fused_loop=auto` (the default) turns the fused loop on where it was measured faster
(`measured_faster`); `on` asks for it wherever it can run (elsewhere one warning line, and the
engine runs as without it); `off` never. Where it runs, engine "inprocess" becomes the
vectorised engine with the fused loop (the same per-client arithmetic, through the model's
functional form), and engine "vectorised" trains its clients one after another in the loop
instead of side by side.

The rule, measured with `benchmarks.round_time` and `benchmarks.vectorised_clients` on this
project's 2-core CPU machine (docs/engines_and_workers.md has the tables): the fused loop is
used on the CPU for models without convolutions (Dense, Flatten, activations: the synthetic
softmax regression, the MLP), where a step's ops are tiny and their dispatch is what a step
costs; on engine vectorised only up to `SIDE_BY_SIDE_PARAMETERS` parameters (its clients side
by side were faster on the MLP). Not for convolutions (the fmnist CNN's fused round, measured
on-demand with dropout forced through, was 5.9x the in-process one, the EMNIST-CR CNN's 105x:
XLA's CPU convolutions), not on a GPU (not measured), not with `--xla` (each step compiled
alone, the older option), and never where `fused_loop.refusal` says (FedPA's epoch means;
dropout, whose masks XLA would draw otherwise).
"""

from absl import logging
import tensorflow as tf

from tff_adaptive.engines import config
from tff_adaptive.engines import functional_model
from tff_adaptive.engines import fused_loop
from tff_adaptive.engines import inprocess
from tff_adaptive.engines import vectorised

MODES = config.FUSED_LOOP_MODES
# Engine vectorised trains clients side by side, one batched op per layer for all of them: on
# the MLP (209,662 parameters, 10 equal clients) that beat the fused loop (0.049 s a round
# against 0.067), on the synthetic softmax regression (610, 100 clients of power-law sizes) the
# fused loop beat it 8-fold (0.017 against 0.13 in chunks of 10). Sizes in between are not
# measured; the bound is set between the two.
SIDE_BY_SIDE_PARAMETERS = 1 << 16
_CONVOLUTIONS = (tf.keras.layers.Conv1D, tf.keras.layers.Conv2D, tf.keras.layers.Conv3D)


def refusal(algorithm) -> str | None:
  """Why the fused loop cannot run `algorithm` (its algorithm, client optimizer, model); None
  if it can."""
  reason = vectorised.check_algorithm_reason(algorithm)
  if reason is not None:
    return reason
  try:
    functional = functional_model.FunctionalModel.from_keras(vectorised.keras_model(algorithm))
  except functional_model.UnsupportedModelError as e:
    return str(e)
  return fused_loop.refusal(algorithm, functional)


def _on_cpu(device: str | None) -> bool:
  if device is not None:
    return 'CPU' in device.upper()
  return not tf.config.list_logical_devices('GPU')


def measured_faster(algorithm, device: str | None, side_by_side: bool = False) -> bool:
  """The rule of `--fused_loop=auto` (module docstring): the CPU, a model without convolutions;
  instead of clients side by side (engine vectorised), also at most `SIDE_BY_SIDE_PARAMETERS`
  parameters."""
  model = vectorised.keras_model(algorithm)
  if not _on_cpu(device) or any(isinstance(layer, _CONVOLUTIONS) for layer in model.layers):
    return False
  return not side_by_side or model.count_params() <= SIDE_BY_SIDE_PARAMETERS


def use_fused(
  algorithm, mode: str, device: str | None, jit_compile: bool, side_by_side: bool = False
) -> bool:
  """Whether to run `algorithm`'s local steps in the fused loop (`--fused_loop=mode`).

  Raises:
    ValueError: an unknown mode, or 'on' with `jit_compile` (one line).
  """
  if mode not in MODES:
    raise ValueError(f'fused_loop: unknown mode {mode!r}; valid choices: {", ".join(MODES)}')
  if mode == 'off':
    return False
  if jit_compile:
    if mode == 'on':
      raise ValueError('--fused_loop=on and --xla exclude each other: choose one')
    return False
  reason = refusal(algorithm)
  if reason is not None:
    if mode == 'on':
      logging.warning('--fused_loop=on: not fused (%s); training as without it', reason)
    return False
  return mode == 'on' or measured_faster(algorithm, device, side_by_side)


def inprocess_engine(algorithm, options) -> inprocess.InProcessEngine:
  """Engine "inprocess" for `options` (`config.EngineOptions`), fused where `use_fused`."""
  if use_fused(algorithm, options.fused_loop, options.device, options.jit_compile):
    return vectorised.VectorisedEngine(algorithm, device=options.device, fused=True)
  return inprocess.InProcessEngine(
    algorithm, device=options.device, jit_compile=options.jit_compile
  )


def vectorised_engine(algorithm, options) -> vectorised.VectorisedEngine:
  """Engine "vectorised" for `options`, its clients in the fused loop where `use_fused`."""
  fused = use_fused(algorithm, options.fused_loop, options.device, False, side_by_side=True)
  return vectorised.VectorisedEngine(
    algorithm, device=options.device, chunk_size=options.chunk_size, fused=fused
  )
