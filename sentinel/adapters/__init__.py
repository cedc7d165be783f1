"""The adapter framework: how the worker calls a target's code at a canonical boundary.

One concept per module: ``contract`` (the `Adapter` base class, `@implements`, the declared
tables: declines, preconditions, deviations, unsupported options), ``excuses`` (a deviation
tied to the code it excuses: body hash, commit range), ``trainer`` (the base
class of real trainers' adapters: package, imports, `load()` outline, function lookup),
``binding`` (a call bound to a drifting signature, function lookup), ``layout`` (rows and
groups), ``loading`` (locating and importing a target), ``shims`` (import stubs),
``spying`` / ``frames`` (what a target function computed inside), ``backport`` (newer
syntax on older Pythons), ``defects`` (an error that is the adapter's fault, named by its
line). Errors live in `sentinel.errors`.

The targets themselves live in the folder adapters/ (installed as `sentinel_adapters`), one
package each; `sentinel.targets` registers them. Everything here runs in the worker process.
"""
