"""From records to the answer: the tables (`aggregate`, each column defined once in `columns`, the ratios in
`ratios`, a row as the report reads it in `rows`), the bottleneck of each cell, the fixes and the answer (`diagnose`,
`recommend`, `verdict`), the figures (`figure_list` names them, `figures` draws them), the bundle a user opens
(`bundle`, its page `bundlepage`) and what the engine itself cost (`enginereport`). Importing the package imports no
plotting library. The walk from a record to the printed verdict: README.md in this folder."""
