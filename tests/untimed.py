"""Hunts in tests are bounded by example counts with a fixed seed, never by the clock: on a
loaded machine a time budget cuts a search short and a seeded hunt then draws other examples
(each round's seed follows the round number), so its outcome would depend on the load. These
budgets never bind; the counts (max_examples) end the hunt. Speed is for benchmarks/."""

HUNT = {"time_budget": 3600.0, "shrink_time": 600.0}  # sentinel.hunt.hunt's keywords
DIFFERENTIAL_SECONDS = 3600.0  # sentinel.hunt.differential's `seconds`
DIFFERENTIAL = {"shrink_time": 600.0}
CLI = ["--time", "3600", "--shrink-time", "600"]  # sentinel hunt's options
