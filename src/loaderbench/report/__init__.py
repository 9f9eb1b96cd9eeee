"""From records to the answer: the tables (`aggregate`, labels in `columns`), the bottleneck of each cell and the fixes
(`diagnose`, `verdict`), the figures (`figure_list` names them, `figures` draws them), the bundle a user opens
(`bundle`) and what the engine itself cost (`enginereport`). Importing the package imports no plotting library."""
