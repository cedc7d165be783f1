"""The hunt's side in the CLI's process: it never imports torch or a target.

`engine` (the phases every hunt runs: start, search, document, write), `single` (one target:
`Hunter`, rounds sent to workers), `differential` (two sides: `DiffHunter`, Hypothesis here,
each batch observed by both), `sides` (a differential hunt's two workers), `state` (settings,
each property's standing), `findings` (findings as scenario YAML), `report` (the hunt report).
"""
