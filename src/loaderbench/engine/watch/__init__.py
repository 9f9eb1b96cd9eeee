"""`loaderbench watch`: a user's own training command run unchanged and timed per batch (`probe`, injected through
`inject/sitecustomize.py`), its process tree sampled (`sample`), its batches read into a window (`window`) and a
record and trace made of them (`record`); `launch` runs it all."""
