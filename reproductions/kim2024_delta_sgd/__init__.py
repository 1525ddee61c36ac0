"""Kim et al. 2024 (Delta-SGD): Table 1 FMNIST column and Table 4, and a Fig. 7-style plot."""
