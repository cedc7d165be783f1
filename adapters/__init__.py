"""The targets, one package each (reference, slime, areal, verl, openrlhf, trl), each laid out
alike: ``adapter`` (the adapter class), ``conventions`` (the trainer's names), ``surfaces``
(boundaries beside the loss), ``deviations`` (its documented differences from the reference).
Installed as `sentinel_adapters`; the framework they build on is `sentinel.adapters`."""
