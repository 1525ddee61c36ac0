"""Pure TF building blocks shared by every algorithm and both engines (no TFF computations)."""
