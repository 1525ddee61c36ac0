"""Al-Shedivat et al. 2021 (FedPA): least squares, fmnist comparison, regimes, Table 3 presets."""
