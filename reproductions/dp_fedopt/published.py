"""dp_fedopt has no published table: no paper ran this setting.

It is Issue 22's study of the library's user-level DP (`--dp`) and quantised uploads
(`--compression`), so its report has no `published` column and nothing here is a paper's
number. What this module holds instead is the study's fixed setting: the defaults of
`reproduce.py`'s flags, by flag name, which are the settings `results/publish.json` records for
the committed run (the README says why each was chosen).
"""

# No paper's numbers to compare with.
PUBLISHED = None

# flag -> the study's value (list flags as their items' text, as publish.json records them).
SETTINGS = {
  'rounds': 200,
  'noise_multipliers': ['1.5', '2.5', '4.0'],  # z of the DP cells
  'compression_bits': ['8', '4'],  # the quantised-upload cells (no DP)
  'num_clients': 1000,  # Fashion-MNIST as N clients ...
  'examples_per_client': 60,  # ... of 60 examples (80% to train)
  'dirichlet_alpha': 1.0,
  'clients_per_round': 50,  # m: sampling rate q = m / N = 0.05
  'client_learning_rate': 0.1,
  'clip': 0.25,  # the fixed clip C
  'initial_clip': 0.1,  # the adaptive clip's initial C
  'fedadam_lr': 0.03,  # the best of a 60-round pilot at z = 1 (README)
  'tau': 1e-3,
  'seed': 1,
  'rounds_per_eval': 10,
}
