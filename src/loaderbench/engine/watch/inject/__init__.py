"""The folder `loaderbench watch` puts first on a watched command's PYTHONPATH: its `sitecustomize` only."""
