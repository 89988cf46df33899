"""The runtime helpers every stage shares: settings, paths, stores, caches, signals and progress."""
