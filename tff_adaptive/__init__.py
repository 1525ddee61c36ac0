"""tff-adaptive: adaptive federated optimization on TensorFlow Federated."""
