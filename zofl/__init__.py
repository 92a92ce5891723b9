"""zofl: hierarchical and zeroth-order federated learning methods on Flower."""
__version__ = "0.1.0"
