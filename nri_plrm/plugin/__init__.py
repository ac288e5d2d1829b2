"""The NRI handlers and their helpers: updates of other containers, Synchronize, resizes,
inference, outcomes."""
