"""A project folder of one's own: `karma init DIR` writes one (starter.py), and `karma` and `dagster dev` find
it (discover.py): $KARMA_PROJECT, else the current directory when it holds a `karma.yaml`, else the package's
defaults. `karma_dagster.runtime.paths` asks discover.py where the project is; nothing here reads `__file__`."""
