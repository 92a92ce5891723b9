"""The mathematics of the strategies as pure numpy functions (no Flower imports)."""
