"""Ju et al. (AdaFedAdam): Table 5 (Synthetic, cross-silo), fairness figures, a settings study."""
