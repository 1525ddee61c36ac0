"""Ju et al. (AdaFedAdam): Table 5 Synthetic row and the fairness figures."""
