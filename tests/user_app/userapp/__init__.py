"""userapp: A Flower / PyTorch app."""
