"""The training loop: rounds, client state, outputs, evaluation, sampling."""
