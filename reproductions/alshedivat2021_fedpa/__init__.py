"""Al-Shedivat et al. 2021 (FedPA): least squares, Table 3 presets, fmnist comparison."""
