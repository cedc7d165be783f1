"""The corpus is data for tests/test_malformed.py: its files are refused on purpose, so the
rl_sentinel plugin must not collect them as scenario tests."""

collect_ignore_glob = ["*/*.yaml", "*.yaml"]
