"""D-PACE: training DFlash-style block drafters, their targets, evaluation and training traces."""
