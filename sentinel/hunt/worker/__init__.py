"""The hunt's side in the worker process (its forked child): it imports torch and the target
through the adapter, so only `sentinel.worker` imports these modules.

`round` (one round of a single-target hunt: Hypothesis with the target in-process), `check`
(one example through the target: the property's verdict and a signature's probes), `session`
(a differential hunt's side: observations of the batches the driver draws).
"""
